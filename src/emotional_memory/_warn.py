"""Warnings attributed to the caller's code rather than to this package's internals."""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_caller(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn`` at the first stack frame outside this package.

    However deep the engine's internals (tracing wrappers, batch helpers), the warning
    names the line of the application that called into the library.

    Args:
        message: the warning text.
        category: the warning class.
    """
    level, frame = 2, sys._getframe(1)  # 1: this function, 2: its caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, category, stacklevel=level)
