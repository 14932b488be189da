"""TOML configuration loading with one-line errors that name the file, the key and what was expected.

Every loader in the project (robots, rigs, network) reads its files through :func:`load_toml`, checks the
whole document against the JSON Schema of its file kind with :func:`check_schema` (unknown keys, types,
ranges) and then reads values with :func:`require`, so that a bad config always fails the same way: a
:class:`ConfigError` whose message is one line, which the ``mms`` command prints without a traceback.
:func:`refuse_other_kind` names a file of the wrong kind (a rig file given where a robot file is expected).
"""
from __future__ import annotations

import difflib
import math
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    import jsonschema


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
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(path, None, "file not found") from None
    except IsADirectoryError:
        raise ConfigError(path, None, "is a directory, expected a TOML file") from None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read: {exc.strerror or exc}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(path, None, f"binary file (NUL byte at offset {nul}), expected a TOML text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, None, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}), "
                                      "expected a TOML file in UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, f"invalid TOML: {' '.join(str(exc).split())}") from None


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


# ------------------------------------------------------------------------------------------- JSON Schema
#: Longest rendering of a refused value in an error message (a huge string or table stays one short line).
MAX_VALUE_CHARS = 60
#: Closest known keys proposed for a misspelt one, and how alike they must be (difflib's ratio, 0..1).
SUGGESTIONS = 3
SUGGESTION_CUTOFF = 0.6
#: Schema keyword with the human wording of what a value must be ("a frequency in (0, 1000] Hz"); JSON
#: Schema ignores keywords it does not know, so the schemas stay standard.
EXPECTED = "x-expected"
#: Schema keyword marking a value or table that refers to names declared elsewhere in the file (a servo named by
#: a joint map): its errors are reported after those of the declarations.
REFERENCE = "x-reference"


def _is_number(checker, value) -> bool:
    # TOML has inf and nan, JSON Schema does not: a config number is finite, and a boolean is never one.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_integer(checker, value) -> bool:
    # JSON Schema counts 1.0 as an integer; a TOML file that writes 1.0 for a count is refused instead.
    return isinstance(value, int) and not isinstance(value, bool)


@cache
def _validator_class() -> type:
    """JSON Schema 2020-12's validator with TOML's numbers. jsonschema is imported at the first validation, not
    with this module: about 0.1 s of CPU (0.3-0.6 s wall on a busy machine) that every `mms` start paid, `--help`
    and the commands without a config file included."""
    import jsonschema

    types = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({"number": _is_number, "integer": _is_integer})
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=types)


_BOUND_SIGNS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
_TYPE_NAMES = {"number": "a number", "integer": "an integer", "string": "a string", "boolean": "true or false",
               "array": "an array", "object": "a table"}


def check_schema(doc: dict[str, Any], schema: dict[str, Any], path: str | Path | None, prefix: str = "") -> None:
    """Raise the first violation of ``schema`` (JSON Schema 2020-12) by ``doc`` as a one-line ConfigError.

    The error names the key path (``joints.elbow.law.k``, ``servos[1].gain``; ``prefix`` is the path of ``doc``
    in its file), the value and what was expected; an unknown key gets the closest known ones (difflib).
    """
    errors = list(_validator_class()(schema).iter_errors(doc))
    if errors:
        # the first in the file's order, references to names last: a bad channel name is reported where the
        # channel is, not where it is referred to
        first = min(errors, key=lambda error: (REFERENCE in error.schema, _document_order(doc, error.absolute_path)))
        raise schema_error(first, path, prefix)


def _document_order(doc: Any, where: Iterable[str | int]) -> list[int]:
    """Where a key path lies in the file, as the index of each part among its siblings (for sorting)."""
    order = []
    for part in where:
        order.append(list(doc).index(part) if isinstance(doc, dict) else part)
        doc = doc[part]
    return order


def schema_error(error: jsonschema.ValidationError, path, prefix: str = "") -> ConfigError:
    """The one-line ConfigError of a jsonschema error (see :func:`check_schema`)."""
    where = list(error.absolute_path)
    value, schema, keyword = error.instance, error.schema, error.validator
    if keyword == "additionalProperties":
        known = list(schema.get("properties", {}))
        unknown = sorted(k for k in value if k not in known)[0]
        return ConfigError(path, key_path(prefix, [*where, unknown]), unknown_key_message(unknown, known))
    if keyword == "required":
        missing = next(k for k in error.validator_value if k not in value)
        strangers = [k for k in value if k not in schema.get("properties", {})]
        misspelt = difflib.get_close_matches(missing, strangers, n=1, cutoff=SUGGESTION_CUTOFF)
        if misspelt:  # "kindd" for "kind": name the key the file has, not only the one it lacks
            return ConfigError(path, key_path(prefix, [*where, misspelt[0]]), f'unknown key; did you mean "{missing}"?')
        wanted = schema.get("properties", {}).get(missing, {})
        return ConfigError(path, key_path(prefix, [*where, missing]), f"missing, expected {expected_text(wanted)}")
    if keyword in ("type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                   "minItems", "maxItems", "minLength", "minProperties", "uniqueItems", "not", "pattern"):
        return ConfigError(path, key_path(prefix, where), f"got {short_repr(value)}, expected {expected_text(schema)}")
    return ConfigError(path, key_path(prefix, where), " ".join(error.message.split()))


def key_path(prefix: str, parts: Iterable[str | int]) -> str | None:
    """``a.b[2].c`` from a prefix and the parts of a path in a document."""
    text = prefix
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or None


def unknown_key_message(unknown: str, known: Iterable[str]) -> str:
    """``unknown key; did you mean "added_mass"?`` (or the list of known keys when none is close)."""
    known = sorted(known)
    close = difflib.get_close_matches(unknown, known, n=SUGGESTIONS, cutoff=SUGGESTION_CUTOFF)
    if close:
        return "unknown key; did you mean " + " or ".join(f'"{k}"' for k in close) + "?"
    return f"unknown key, expected one of {', '.join(known) or 'none'}"


def expected_text(schema: dict[str, Any]) -> str:
    """What a value of ``schema`` must be, in words: its ``x-expected``, else built from its keywords."""
    if EXPECTED in schema:
        return schema[EXPECTED]
    if "enum" in schema:
        return "one of " + ", ".join(short_repr(v) for v in schema["enum"])
    if "const" in schema:
        return short_repr(schema["const"])
    kinds = schema.get("type", "a value")
    text = " or ".join(_TYPE_NAMES.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds))
    low = next(((key, schema[key]) for key in ("minimum", "exclusiveMinimum") if key in schema), None)
    high = next(((key, schema[key]) for key in ("maximum", "exclusiveMaximum") if key in schema), None)
    bounds = []
    if low and high:
        bounds.append(f"in {'[' if low[0] == 'minimum' else '('}{low[1]:.10g}, {high[1]:.10g}"
                      f"{']' if high[0] == 'maximum' else ')'}")
    elif low or high:
        key, bound = low or high
        bounds.append(f"{_BOUND_SIGNS[key]} {bound:.10g}")
    if "minItems" in schema or "maxItems" in schema:
        bounds.append(f"of {schema.get('minItems', 0)} to {schema.get('maxItems', 'any number of')} items")
    return " ".join([text, *bounds]) if bounds else text


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to :data:`MAX_VALUE_CHARS` (TOML strings in double quotes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = f'"{value}"' if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."


# ------------------------------------------------------------------------------------------- file kinds
#: Each file kind, the top-level table that marks it, the commands that take it and a shipped example.
FILE_KINDS: dict[str, tuple[str, str, str]] = {
    "robot": ("robot", "`mms sim` and `mms serve`", "flapper (configs/robots/flapper.toml)"),
    "rig": ("rig", "`mms drive` and `mms emulate`", "flapper (configs/rigs/flapper_rig.toml)"),
    "network": ("sim", "the --network option", "configs/network.toml"),
}
#: The package holding the shipped configs as package data (configs/ in a clone).
SHIPPED_PACKAGE = "configs"
#: Folder of each file kind inside :data:`SHIPPED_PACKAGE`, and the file-name suffix its names drop
#: (rig files are ``<robot>_rig.toml``; the name ``flapper-dynamixel`` is ``flapper_dynamixel_rig.toml``).
SHIPPED_FOLDERS: dict[str, tuple[str, str]] = {"robot": ("robots", ""), "rig": ("rigs", "_rig"), "network": (".", "")}


def file_kind(doc: dict[str, Any]) -> str | None:
    """"robot", "rig" or "network" from a parsed file's top-level tables, or None if it looks like none."""
    for kind, (table, _, _) in FILE_KINDS.items():
        if isinstance(doc.get(table), dict):
            return kind
    if any(isinstance(doc.get(table), dict) for table in ("driver", "recorder")):
        return "network"
    return None


def shipped_configs(kind: str) -> dict[str, Path]:
    """The shipped files of one kind ("robot", "rig", "network") by name: ``{"flapper": .../flapper.toml}``.

    Found through ``importlib.resources``, so an installed package finds them wherever it is run from; the
    package is installed as plain files (never zipped), so each is a real path that relative references
    (a robot's ``urdf = "pendulum.urdf"``) resolve against.
    """
    folder, suffix = SHIPPED_FOLDERS[kind]
    root = Path(str(resources.files(SHIPPED_PACKAGE) / folder))
    names = {}
    for path in root.glob("*.toml"):
        stem = path.stem.removesuffix(suffix) if suffix and path.stem.endswith(suffix) else path.stem
        names[stem.replace("_", "-")] = path
    return dict(sorted(names.items()))


def shipped_config(kind: str, name: str) -> Path:
    """The shipped file of ``kind`` called ``name`` (see :func:`shipped_configs`); ConfigError if none is."""
    return resolve_config(kind, name, files=False)


def resolve_config(kind: str, value: str | Path, *, files: bool = True) -> Path:
    """A config argument as a path: an existing file (``files``), else a shipped name of ``kind``, checked to
    be a file of that kind. ``flapper_rig`` and ``flapper-rig`` name the rig ``flapper`` too."""
    path = Path(value)
    if files and path.is_file():
        refuse_other_kind(load_toml(path), path, kind)
        return path
    shipped = shipped_configs(kind)
    suffix = SHIPPED_FOLDERS[kind][1].replace("_", "-")
    key = str(value).removesuffix(".toml").replace("_", "-")
    key = key.removesuffix(suffix) if suffix and key.endswith(suffix) else key
    if key in shipped:
        return shipped[key]
    close = difflib.get_close_matches(key, shipped, n=SUGGESTIONS, cutoff=SUGGESTION_CUTOFF)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    missing = "file not found, and not " if files else "not "
    raise ConfigError(value, None, f"{missing}a shipped {kind} name (names: {', '.join(shipped)}){hint}")


def refuse_other_kind(doc: dict[str, Any], path: str | Path | None, expected: str) -> None:
    """A one-line ConfigError if ``doc`` is a file of another kind than ``expected`` (see :data:`FILE_KINDS`):
    ``this is a rig file ([rig] kind "mcu"), not a robot file: `mms sim` and `mms serve` take a robot such as ...``."""
    kind = file_kind(doc)
    if kind is None or kind == expected:
        return
    tables = [name for name in doc if isinstance(doc[name], dict)]
    marker = FILE_KINDS[kind][0] if FILE_KINDS[kind][0] in tables else tables[0]
    named = doc[marker].get("kind")
    detail = f"[{marker}]" + (f" kind {short_repr(named)}" if isinstance(named, str) else "")
    _, commands, example = FILE_KINDS[expected]
    raise ConfigError(path, None, f"this is a {kind} file ({detail}), not a {expected} file: {commands} take a "
                                  f"{expected} such as {example}")


# ------------------------------------------------------------------------------------------- schema builders
# Short constructors of the JSON Schema dicts the loaders declare (plain JSON Schema, nothing else).
def number(minimum: float | None = None, maximum: float | None = None, *, above: float | None = None,
           below: float | None = None, expected: str | None = None) -> dict[str, Any]:
    """A finite number in the given bounds (``above``/``below``: exclusive); ``expected`` words it."""
    schema: dict[str, Any] = {"type": "number"}
    for key, bound in (("minimum", minimum), ("maximum", maximum), ("exclusiveMinimum", above),
                       ("exclusiveMaximum", below)):
        if bound is not None:
            schema[key] = bound
    if expected:
        schema[EXPECTED] = expected
    return schema


def integer(minimum: int | None = None, maximum: int | None = None, *, expected: str | None = None) -> dict[str, Any]:
    """An integer in [minimum, maximum]."""
    schema = number(minimum, maximum, expected=expected)
    schema["type"] = "integer"
    return schema


def one_of(*values: Any, expected: str | None = None) -> dict[str, Any]:
    """One of the given values (strings, numbers)."""
    return {"enum": list(values), **({EXPECTED: expected} if expected else {})}


def string(expected: str = "a non-empty string") -> dict[str, Any]:
    return {"type": "string", "minLength": 1, EXPECTED: expected}


BOOLEAN: dict[str, Any] = {"type": "boolean"}


def array(items: dict[str, Any], min_items: int = 0, max_items: int | None = None, *,
          expected: str | None = None) -> dict[str, Any]:
    """An array of ``items``, ``min_items`` to ``max_items`` long."""
    schema: dict[str, Any] = {"type": "array", "items": items, "minItems": min_items}
    if max_items is not None:
        schema["maxItems"] = max_items
    if expected:
        schema[EXPECTED] = expected
    return schema


def table(properties: dict[str, Any], required: Iterable[str] = (), **extra: Any) -> dict[str, Any]:
    """A TOML table with exactly these keys (unknown keys refused), ``required`` among them."""
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False, **extra}


def tables_by_name(item: dict[str, Any]) -> dict[str, Any]:
    """A table of sub-tables named freely (``[joints.<name>]``), each following ``item``."""
    return {"type": "object", "additionalProperties": item}
