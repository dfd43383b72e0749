def register(sub):  # filled in below in this session
    pass
