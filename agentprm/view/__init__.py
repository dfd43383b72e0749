"""The run viewer: a run folder (collect.py) as one self-contained HTML page (page.py), `agentprm view`."""
