"""Values read from stored files or given by a user's code, as text a terminal only displays."""

from __future__ import annotations


def _escaped(char: str) -> str:
    return repr(char)[1:-1]  # \x1b, \x00, \n, \u200b: a non-printable character as Python writes it


def printable(value: object, *, newlines: bool = False) -> str:
    """``str(value)`` with every non-printable character escaped (ESC, NUL, CR, other controls).

    Used for every value printed from a stored file (and for ``tune``'s case names and errors), so
    that a crafted name cannot drive the terminal; ``newlines`` keeps line breaks (messages of
    several lines).
    """
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or (newlines and c == "\n") else _escaped(c) for c in text)
