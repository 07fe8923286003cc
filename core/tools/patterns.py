"""RE2 patterns from text others write (tool schemas, approval rules): compiled under caps, refusals kept, matched in linear time.

RE2 (google-re2) refuses what backtracking engines need for catastrophic cases (look-arounds, back-references),
and its matching time is linear in the text, times a factor that grows with the compiled program: so a pattern's
length, its program's size and RE2's memory are capped too.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

# RE2's memory for one program (a bigger one is refused while compiling), a pattern's length, its program's size.
RE2_MAX_MEM_BYTES = 256 * 1024
MAX_PATTERN_CHARS = 1_000
MAX_PATTERN_PROGRAM = 5_000
# Programs kept compiled: a client's own tools repeat a few patterns, while a hostile one can send new ones with every
# request, each program holding up to RE2_MAX_MEM_BYTES once matched (4,096 kept could hold a gigabyte).
PROGRAM_CACHE_SIZE = 256


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the writer's mistake, said in the 400; not a line on stderr
    options.never_capture = True  # only whether it matches is asked
    options.max_mem = RE2_MAX_MEM_BYTES
    return options


_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def _program(pattern: str) -> tuple[Any, str]:
    """The RE2 program for a pattern and "", or None and why not (refusals are kept too: they cost as much)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return None, f"it is longer than {MAX_PATTERN_CHARS} characters"
    try:
        program = re2.compile(pattern, options=_OPTIONS)
    except UnicodeEncodeError:
        return None, "it is not valid Unicode (a lone surrogate)"
    except re2.error as error:
        return None, re2_error_text(error)
    if program.programsize > MAX_PATTERN_PROGRAM:
        return None, f"its RE2 program has {program.programsize} instructions; at most {MAX_PATTERN_PROGRAM} are accepted"
    return program, ""


def compiled(pattern: str) -> Any:
    """The RE2 program for a pattern (re2.error saying why when it is refused)."""
    program, problem = _program(pattern)
    if program is None:
        raise re2.error(problem)
    return program


def re2_error_text(error: BaseException) -> str:
    detail = error.args[0] if error.args else ""
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


def refusal(pattern: str) -> str:
    """Why RE2 refuses `pattern` here, or "" (compiling it, so the program is ready for matching)."""
    return _program(pattern)[1]


def search(pattern: str, text: str) -> bool:
    """Whether RE2 finds `pattern` in `text`, in time linear in the text (re2.error for a pattern it refuses)."""
    try:
        return compiled(pattern).search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate, which UTF-8 (and so RE2) cannot hold: matched as U+FFFD
        return compiled(pattern).search(text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")) is not None
