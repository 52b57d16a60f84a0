"""User-facing errors: every one names the problem and the fix, in one line."""


class FaceBridgeError(Exception):
    """An error the user can act on. `str()` gives 'problem. fix' on one line."""

    def __init__(self, problem: str, fix: str = ""):
        self.problem = problem.rstrip(". ")
        self.fix = fix.rstrip(". ")
        super().__init__(f"{self.problem}. {self.fix}." if self.fix else f"{self.problem}.")


class ModelError(FaceBridgeError):
    """A shipped or user-supplied model is missing, corrupt or does not match its manifest."""


class SourceError(FaceBridgeError):
    """A camera, video, image folder or audio input cannot be used."""


class SinkError(FaceBridgeError):
    """An output (UDP, OSC, gRPC, recorder) cannot be opened."""


class RunEnded(FaceBridgeError):
    """A failure that ends a run rather than one frame: the stream cannot go on (a remote server that refused the
    token or closed the stream). The runner stops and the command ends with this one line."""
