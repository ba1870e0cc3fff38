"""The one error class of droidheap: what the user did or what the device did, in one line.

The CLI's top level prints `droidheap: <message>` and exits with `exit_code`; nothing that reaches
the user as a DroidheapError shows a traceback.
"""


class DroidheapError(Exception):
    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message
