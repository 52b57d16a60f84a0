"""Why an update was refused: one stable reason name and one exit code per kind of refusal, never reused.

Every refusal is an `UpdateRefused` subclass, a FaceBridgeError with one line saying what was wrong and what to
do. Scripts match on `reason` (or the exit code); people read the message. The installed release keeps serving
after every one of them. The table is documented in docs/UPDATES.md; a new reason gets a new code at the end.
"""
from __future__ import annotations

from bridge.errors import FaceBridgeError


class UpdateRefused(FaceBridgeError):
    """An update that was not installed. `reason` is stable for scripts; `exit_code` is the process exit code."""

    reason = "refused"
    exit_code = 9
    default_fix = "keep the installed release; ask the publisher for a new signed release"

    def __init__(self, problem: str, fix: str | None = None):
        super().__init__(problem, self.default_fix if fix is None else fix)

    def as_dict(self) -> dict:
        return {"reason": self.reason, "exit_code": self.exit_code, "message": str(self)}


class SignatureInvalid(UpdateRefused):
    reason, exit_code = "signature-invalid", 10
    default_fix = "the repository was tampered with or damaged; republish it with `fedagent publish`"


class UntrustedKey(UpdateRefused):
    reason, exit_code = "untrusted-key", 11
    default_fix = ("metadata is signed by a key this device does not trust (unknown or revoked); install only "
                   "from your publisher's repository")


class ThresholdNotMet(UpdateRefused):
    reason, exit_code = "threshold", 12
    default_fix = "collect the missing signatures (every key holder runs `fedagent publish`), then republish"


class Rollback(UpdateRefused):
    reason, exit_code = "rollback", 13
    default_fix = "this device already has a newer release; publish a release with a higher number"


class Expired(UpdateRefused):
    reason, exit_code = "expired", 14
    default_fix = "the repository's metadata has expired; re-sign it with `fedagent publish --keys KEYS --repo REPO`"


class HashMismatch(UpdateRefused):
    reason, exit_code = "hash-mismatch", 15
    default_fix = "a file does not match its signed length or sha256; fetch from an intact copy of the repository"


class TooLarge(UpdateRefused):
    reason, exit_code = "too-large", 16
    default_fix = "the server sent more than was signed or allowed; use a trusted server, or raise --max-bytes"


class BadPath(UpdateRefused):
    reason, exit_code = "bad-path", 17
    default_fix = "file names must be plain names (letters, digits, . _ -) and real files, never links"


class Incompatible(UpdateRefused):
    reason, exit_code = "incompatible", 18
    default_fix = "publish a release built for this device's models and hardware"


class SmokeTestFailed(UpdateRefused):
    reason, exit_code = "smoke-test-failed", 19
    default_fix = "the model does not reproduce its declared reference outputs; publish a working release"


class NoSpace(UpdateRefused):
    reason, exit_code = "no-space", 20
    default_fix = "free disk space where the update state lives (or pass --state on a larger disk), then retry"


class Busy(UpdateRefused):
    reason, exit_code = "busy", 21
    default_fix = "another installer is running on this state directory; wait for it to finish and retry"


class Malformed(UpdateRefused):
    reason, exit_code = "malformed", 22
    default_fix = "the repository holds metadata this device cannot parse; republish it with `fedagent publish`"


class FileSetMismatch(UpdateRefused):
    reason, exit_code = "file-set", 23
    default_fix = "the release lists files that are not signed, or lacks files its kind needs; republish it"


class Equivocation(UpdateRefused):
    reason, exit_code = "equivocation", 24
    default_fix = "two different releases carry the same number; the publisher must publish a new number"


class NotFound(UpdateRefused):
    reason, exit_code = "not-found", 25
    default_fix = "check --from: it must be a repository written by `fedagent publish` (with metadata/ and targets/)"


class Network(UpdateRefused):
    reason, exit_code = "network", 26
    default_fix = "check that the repository server is running and reachable, then retry"


class NoTrustRoot(UpdateRefused):
    reason, exit_code = "no-trust-root", 27
    default_fix = "pass --trust KEYS/trust.json (from `fedagent keys init`) on the first install"


class NoPrevious(UpdateRefused):
    reason, exit_code = "no-previous", 28
    default_fix = "there is no earlier release to go back to; install a newer release instead"


class StateCorrupt(UpdateRefused):
    reason, exit_code = "state-corrupt", 29
    default_fix = ("the update state cannot be read; restore it from a backup, or remove the state directory and "
                   "bootstrap again with --trust (this forgets the rollback floor)")


class ClockBehind(UpdateRefused):
    reason, exit_code = "clock", 30
    default_fix = ("set this device's clock right (e.g. enable NTP: `timedatectl set-ntp true`), then retry; a clock "
                   "set back would accept expired metadata")


class UnsafeState(UpdateRefused):
    reason, exit_code = "unsafe-state", 31
    default_fix = ("use a state folder of your own that only you can write, with no links inside (remove this one, "
                   "or pass --state DIR)")


class StateFolder(UpdateRefused):
    reason, exit_code = "state-folder", 33
    default_fix = "pass --state a folder of your own (the first `fedagent update install --state DIR` creates it)"


class SomeRefused(UpdateRefused):
    """Not raised by the installer: the exit code of an install where some models installed and others were
    refused (each refusal is reported per model)."""

    reason, exit_code = "some-refused", 32
    default_fix = "see each model's reason; the models that installed are active"


REASONS: dict[str, type[UpdateRefused]] = {
    cls.reason: cls for cls in (SignatureInvalid, UntrustedKey, ThresholdNotMet, Rollback, Expired, HashMismatch,
                                TooLarge, BadPath, Incompatible, SmokeTestFailed, NoSpace, Busy, Malformed,
                                FileSetMismatch, Equivocation, NotFound, Network, NoTrustRoot, NoPrevious,
                                StateCorrupt, ClockBehind, UnsafeState, SomeRefused, StateFolder)
}
