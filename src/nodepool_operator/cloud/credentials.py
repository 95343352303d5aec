"""The cloud API's bearer token, read from a file so a rotated Kubernetes Secret needs no restart.

A token never comes from a flag or an environment variable (both show in ``ps``, in the
Pod spec and in crash reports); it comes from a file, usually a Secret's volume. The file
is stat'ed on every use and read again when it changed: the kubelet updates a mounted
Secret by swapping a symlink, so a rotation shows as a new inode or mtime.

Neither class ever puts the token in its ``repr`` or in an error message.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import Protocol

__all__ = [
    "REDACTED",
    "CredentialError",
    "StaticToken",
    "TokenFile",
    "TokenSource",
    "redacted",
    "write_new_token",
]

REDACTED = "<redacted>"
#: A token is found in a text only where no letter or digit touches it: punctuation
#: around it ("token=abc,", "Bearer abc.") still leaves it a token to take out.
_WORD_CHARACTERS = r"A-Za-z0-9"


def redacted(text: str, token: str | None) -> str:
    """``text`` with every whole occurrence of ``token`` replaced by ``REDACTED``: where it
    stands alone, as a server echoing a header writes it, not inside a longer word, so a
    token that happens to be part of a word ("list" in "listing") leaves the text
    readable. A token equal to a whole word is still taken out: a secret's safety comes
    before a message's wording."""
    if not token:
        return text
    alone = re.compile(rf"(?<![{_WORD_CHARACTERS}]){re.escape(token)}(?![{_WORD_CHARACTERS}])")
    return alone.sub(REDACTED, text)


class CredentialError(Exception):
    """The token cannot be had (file missing, unreadable or empty); the message names the
    file, never its content."""


class TokenSource(Protocol):
    def read(self) -> str:
        """The current token; raises ``CredentialError`` when there is none."""
        ...


class TokenFile:
    """The token in ``path`` (surrounding whitespace stripped), re-read when the file changes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._seen: tuple[int, int, int, int] | None = None
        self._token = ""

    def read(self) -> str:
        try:
            stat = os.stat(self.path)
            seen = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if seen != self._seen:
                with open(self.path, encoding="utf-8") as handle:
                    token = handle.read().strip()
                if not token:
                    raise CredentialError(f"the token file {self.path} is empty")
                self._token, self._seen = token, seen
        except OSError as e:
            raise CredentialError(
                f"cannot read the token file {self.path}: {e.strerror or type(e).__name__}"
            ) from e
        except UnicodeDecodeError:
            # Not chained: the decode error holds the file's bytes, which a traceback of
            # the chain could show.
            raise CredentialError(f"the token file {self.path} is not UTF-8 text") from None
        return self._token

    def __repr__(self) -> str:
        return f"TokenFile({self.path!r})"


class StaticToken:
    """A token held in memory (tests, and callers that got it from elsewhere)."""

    def __init__(self, token: str) -> None:
        if not token.strip():
            raise CredentialError("the token is empty")
        self._token = token.strip()

    def read(self) -> str:
        return self._token

    def __repr__(self) -> str:
        return "StaticToken(<redacted>)"


def write_new_token(path: str | os.PathLike[str]) -> TokenFile:
    """A fresh random token (256 bits) written to ``path``, readable by its owner only.

    For local runs (the demo, tests, benchmarks), where one process starts both the cloud
    and the operator and hands each the same file.
    """
    target = os.fspath(path)
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    # O_EXCL on a fresh name, then rename: the token is never in a file others can read.
    partial = f"{target}.{os.getpid()}.tmp"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    os.replace(partial, target)
    return TokenFile(target)
