"""User-facing errors: the CLI prints them as one line and exits with code 2 (no traceback)."""


class UserError(Exception):
    """Bad input from the user (missing folder, malformed file, unknown name). Message names the file/field."""


def require(cond: bool, msg: str) -> None:
    if not cond:
        raise UserError(msg)
