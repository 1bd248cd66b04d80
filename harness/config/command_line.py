"""The command line of `python run.py`, tried before Hydra runs a job: each job's overrides are
applied as Hydra applies them (`harness.config.framework_internals`) to the config composed with
the job's group options, so that an unknown key (`model.feture_dim=8`), a wrong type
(`optim.lr=abc`, against the schema of `harness.config.settings`) or an option a group does not
have (`model=softmx`, also in a sweep: `-m model=softmax,softmx`) is refused before the first
job, with one line (Hydra's or OmegaConf's own error, cut to its first line, and the nearest
valid name) and exit 2 (`harness.records.failures`):

    error: model.feture_dim=8 is refused: Key 'feture_dim' is not in struct (did you mean
           model.feature_dim?)
    error: model=softmx is refused: softmx is not an option of model (did you mean model=softmax?)

A value out of its declared range (`threads=-1`) is refused there too. `+key` adds only what
the harness reads: a config group, a Lightning argument under `trainer.`
or a key of Hydra's. What Hydra cannot parse is left to Hydra's message, and `HYDRA_FULL_ERROR=1`
skips this check (Hydra's full error instead)."""

import copy
import difflib
import inspect
import sys
from collections.abc import Iterable
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from harness.config.compose import CONF_DIR
from harness.config.framework_internals import apply_overrides, hydra_args_parser
from harness.config.group_nodes import SOURCES, group_nodes, group_options
from harness.config.refusal import BadInput, as_bad_input, full_error, refused
from harness.config.settings import check_settings

HYDRA_GROUPS = {"hydra", "hydra/launcher", "hydra/sweeper", "hydra/job_logging", "hydra/help"}
"""Hydra's own groups (their options include Hydra's plugins): passed as they are."""


def overrides_in(argv: list[str]) -> list[str] | None:
    """The overrides of a command line (`sys.argv[1:]`), or None when this check does not
    apply: another config (`--config-name`, `--config-path`, `--config-dir`), shell completion,
    Hydra's help, or arguments Hydra's parser itself refuses (its usage error says what)."""
    args, unknown = hydra_args_parser().parse_known_args(argv)
    other = args.config_name or args.config_path or args.config_dir
    if unknown or other or args.shell_completion or args.hydra_help:
        return None
    return list(args.overrides)


def value_strings(override: Override) -> list[str] | None:
    """Each value an override gives its key, in Hydra's syntax (each of a sweep's); None for a
    `glob(...)` or a sweep that cannot be listed (`interval(...)`, for other sweepers)."""
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        return None
    if not override.is_sweep_override():
        return [override.get_value_element_as_str()]
    try:
        return list(override.sweep_string_iterator())
    except (HydraException, TypeError, ValueError):
        return None


def one_value_each(override: Override) -> list[Override]:
    """The override itself, or one override per value of a sweep (`optim.lr=0.1,abc`)."""
    if not override.is_sweep_override():
        return [override]
    key, parser = override.get_key_element(), OverridesParser.create()
    return [parser.parse_override(f"{key}={value}") for value in value_strings(override) or []]


def nearest(key: str, known: Iterable[str]) -> str | None:
    """The known key that ends with the same name as `key` (`lr` -> `optim.lr`), else the one
    nearest to it (difflib), else the nearest name of its own section."""
    known = sorted(known)
    name, section = key.rsplit(".", 1)[-1], key.rpartition(".")[0]
    same = [k for k in known if k.rsplit(".", 1)[-1] == name and k != key]
    close = same or difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if not close:
        siblings = {k.rsplit(".", 1)[-1]: k for k in known if k.rpartition(".")[0] == section}
        close = [siblings[n] for n in difflib.get_close_matches(name, sorted(siblings), n=1)]
    return close[0] if close else None


def did_you_mean(key: str, known: set[str]) -> str:
    """`(did you mean optim.lr?)` with the nearest known key, else the nearest key of other
    options of the `model` or `task` group with the options that have it (`model.feature_dim`
    with model=softmax: `(a key of model=based, favor, linear, rff)`); else where every key is
    listed."""
    others: dict[str, list[str]] = {}
    for group in SOURCES:
        for option, node in sorted(group_nodes(group).items()):
            for name in node:
                others.setdefault(f"{group}.{name}", []).append(option)
    close = nearest(key, known) or nearest(key, others) or key
    having = None if close in known else others.get(close)
    where = f"a key of {close.split('.', 1)[0]}={', '.join(having)}" if having else ""
    if close == key:
        return f"({where or '`python run.py --cfg job` lists every key'})"
    return f"(did you mean {close}?{' ' + where if where else ''})"


def lightning_arguments() -> set[str]:
    """The arguments of Lightning's `Trainer`, which `+trainer.<name>=...` may add (Lightning
    is imported for a `+trainer.` key only)."""
    import lightning as L

    return set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}


def check_added_keys(overrides: Iterable[str], known: set[str], groups: set[str]) -> None:
    """Refuse `+key=value` (and `++key=value`) for a key the harness does not read: Hydra would
    add it to the config and the config hash, and nothing would use it. `known`: every key of
    the config composed without these overrides; `groups`: the config groups, which
    `+group=option` may add. Keys under `hydra.` are Hydra's; `trainer.<name>` may add any
    argument of Lightning's `Trainer`."""
    for override in overrides:
        if not override.startswith("+"):
            continue
        key = override.lstrip("+").split("=", 1)[0].split("@", 1)[0]
        section, _, name = key.partition(".")
        if key in known or key in groups or section == "hydra":
            continue
        if section == "trainer" and name in lightning_arguments():
            continue
        raise BadInput(f"{override} is refused: {key} is not a setting {did_you_mean(key, known)}")


def check_group_option(override: Override, options: dict[str, list[str]]) -> None:
    """Refuse an option a group does not have, with the nearest one (else the options)."""
    group = override.key_or_group
    for value in value_strings(override) or []:
        if value == "null" or value in options[group]:
            continue
        close = difflib.get_close_matches(value, options[group], n=1, cutoff=0.5)
        prefix = "+" if override.is_add() else ""
        hint = f"did you mean {prefix}{group}={close[0]}?" if close else "options: "
        hint += "" if close else ", ".join(options[group])
        raise BadInput(
            f"{override.input_line} is refused: {value} is not an option of {group} ({hint})"
        )


def job_variants(parsed: list[Override], options: dict[str, list[str]]) -> list[list[str]]:
    """The group options of the command's jobs, one group varied at a time: the first option
    of every group sweep, and each other option of one group in turn (as overrides)."""
    chosen = {
        o.get_key_element(): value_strings(o) or []
        for o in parsed
        if o.key_or_group in options and not o.is_delete()
    }
    base = {group: values[0] for group, values in chosen.items() if values}
    variants = [base, *({**base, g: v} for g, values in chosen.items() for v in values[1:])]
    return [[f"{g}={v}" for g, v in variant.items()] for variant in variants]


def composed(overrides: list[str]) -> DictConfig | None:
    """The config with these group options, None when it does not compose (Hydra says why)."""
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return compose("config", overrides=overrides)
    except Exception:  # noqa: BLE001 - a config that does not compose is Hydra's to report
        return None


def keys_of(node: Any, prefix: str = "") -> set[str]:
    """Every dotted key of a config (containers included)."""
    if not isinstance(node, dict):
        return set()
    return {
        k for key, v in node.items() for k in {f"{prefix}{key}", *keys_of(v, f"{prefix}{key}.")}
    }


def try_override(override: Override, cfg: DictConfig, known: set[str]) -> None:
    """Apply a key override to a copy of `cfg` as Hydra would and hold the result to the
    declared ranges (`check_settings`); Hydra's error as one `BadInput` line, with the nearest
    key where the key is unknown."""
    job = copy.deepcopy(cfg)
    try:
        apply_overrides([override], job)
    except HydraException as error:
        key, cause = override.key_or_group, error.__cause__ or error
        hint = "" if key in known else f" {did_you_mean(key, known)}"
        message = str(cause).strip().splitlines()[0]
        raise BadInput(f"{override.input_line} is refused: {message}{hint}") from error
    with as_bad_input():
        check_settings(job)


def check_overrides(overrides: list[str]) -> None:
    """Raise `BadInput` for the first mistake of `overrides` (group options first, then keys,
    in every job variant); overrides Hydra cannot parse are left to Hydra."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return
    options = group_options()
    groups = set(options) | HYDRA_GROUPS
    for override in parsed:
        if override.key_or_group in options and not override.is_delete():
            check_group_option(override, options)
    keys = [
        o
        for o in parsed
        if o.key_or_group not in groups and not o.key_or_group.startswith("hydra.")
    ]
    for variant in job_variants(parsed, options):
        cfg = composed(variant)
        if cfg is None:
            return
        known = keys_of(OmegaConf.to_container(cfg, resolve=False))
        check_added_keys([o.input_line for o in keys], known, groups)
        for override in (one for o in keys for one in one_value_each(o)):
            try_override(override, cfg, known)


def check_command_line(argv: list[str]) -> None:
    """Exit 2 with one line (`error: ...`) at the first mistake of `argv` (`sys.argv[1:]`);
    nothing with `HYDRA_FULL_ERROR=1`, which shows Hydra's full error."""
    overrides = None if full_error() else overrides_in(argv)
    try:
        if overrides:
            check_overrides(overrides)
    except BadInput as error:
        sys.exit(refused(error))
