"""TOML configuration loading with one-line errors that name the file, the key and what was expected.

Every loader in the project (robots, rigs, network) reads its files through :func:`load_toml` and checks
values with :func:`require`, so that a bad config always fails the same way: a :class:`ConfigError`
whose message is one line, which the ``mms`` command prints without a traceback.
"""
from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, Callable


class ConfigError(ValueError):
    """A configuration problem, reported as ``file: key: message`` on one line."""

    def __init__(self, path: str | Path | None, key: str | None, message: str):
        self.path = None if path is None else str(path)
        self.key = key
        self.message = message
        where = ": ".join(part for part in (self.path, key) if part)
        super().__init__(f"{where}: {message}" if where else message)


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; a missing file or a syntax error becomes a :class:`ConfigError`."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(path, None, "file not found") from None
    except IsADirectoryError:
        raise ConfigError(path, None, "is a directory, expected a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, f"invalid TOML: {exc}") from None


_MISSING = object()


def require(table: dict[str, Any], key: str, kind: type | tuple[type, ...], *, path: str | Path | None,
            prefix: str = "", default: Any = _MISSING,
            check: Callable[[Any], bool] | None = None, expected: str | None = None) -> Any:
    """Return ``table[key]`` checked against ``kind`` (and ``check``), or raise a one-line ConfigError.

    ``prefix`` is the dotted path of ``table`` inside the file (``"joints.stroke_r"``), so the error names
    the full key. Integers are accepted where floats are expected; booleans are never taken for numbers.
    """
    full_key = f"{prefix}.{key}" if prefix else key
    if key not in table:
        if default is not _MISSING:
            return default
        raise ConfigError(path, full_key, f"missing, expected {expected or _kind_name(kind)}")
    value = table[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(path, full_key, f"got {value!r}, expected {expected or _kind_name(kind)}")
    if not isinstance(value, kinds):
        raise ConfigError(path, full_key, f"got {value!r}, expected {expected or _kind_name(kind)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(path, full_key, f"got {value!r}, expected a finite number")
    if check is not None and not check(value):
        raise ConfigError(path, full_key, f"got {value!r}, expected {expected or 'a valid value'}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {float: "a number", int: "an integer", str: "a string", bool: "true or false",
             list: "an array", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
