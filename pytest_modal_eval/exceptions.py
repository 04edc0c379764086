"""Every error the plugin raises on purpose, in one place.

Each one carries a message meant for the user as is: what failed, which file or field, and
the fix. The plugin reports these without a traceback into its own code.
"""

from __future__ import annotations

import argparse


class ModalEvalError(Exception):
    """Base of the errors below."""


class EnvironmentLoadError(ModalEvalError):
    """An environment that cannot be loaded; the message says what to do."""


class RunAborted(ModalEvalError):
    """The run was stopped early; finished examples are already recorded."""


class EvalProblem(ModalEvalError):
    """A user-facing failure: reported as its message, without a traceback."""


class RunLockError(ModalEvalError):
    """A run's lock could not be taken: another process still evaluates the run after the
    wait (the message names it), or the run directory cannot hold a lock."""


class BenchmarkError(ModalEvalError):
    """A benchmark file that cannot be used; the message names the file, field and fix."""


class BaselineError(ModalEvalError, ValueError):
    """A stored baseline cannot be read; the message names the file."""


class ServerStartError(ModalEvalError, RuntimeError):
    """The server for a profile could not be started; the message says why and where to look."""


class ServingError(ModalEvalError):
    """A server could not be started or reached.

    The message is shown to the user as is: it says what failed, where the log is and what to
    check, so callers should not wrap it in a traceback.
    """


class EndpointError(ModalEvalError):
    """The endpoint cannot be used; the message says what was tried and what to check."""


class DirectClientError(ModalEvalError, RuntimeError):
    """The evaluation's client cannot send a rollout's request itself (an unreadable proxy
    setting, or verifiers posting in a shape it does not know); the message says what to do."""


class ShareError(ModalEvalError):
    """Results could not be shared (Hub push, MLflow logging); the message names the run,
    file or setting and the fix."""


class OptionError(ModalEvalError, argparse.ArgumentTypeError):
    """A command-line option or ini key with a value the plugin cannot use; the message names
    the option and the fix. The plugin reports it as pytest's usage error; as an option's
    ``type=`` it is argparse's own error for that option."""


class RunFileError(EvalProblem):
    """A run file (``results.jsonl``, ``checkpoint.jsonl``, ``metadata.json``,
    ``run_config.json``) that cannot be read as its schema says; the message names the file,
    the line and the field, and the fix. Every command reports it the same way."""


class RecordingError(EvalProblem):
    """A run's file could not be written (disk full, permissions, a file-size limit); the
    message names the path and the fix. Finished examples are already in the checkpoint."""


class DetachError(ModalEvalError):
    """A detached session (``--detach``) could not be started, followed, pulled or stopped, or
    Modal refused what it asked; the message names the session, run or setting and the fix."""


class SecretWarning(UserWarning):
    """A configured secret the redactor cannot keep out of text as it keeps the others (too
    short to be searched for, or a plain word); the message names where it was set, never its
    value."""
