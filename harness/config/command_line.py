"""The names on `python run.py`'s command line, checked before Hydra composes: an unknown key
(`model.feture_dim=8`), a `+key` nothing reads, a `~key` that is not there, or an option a
config group does not have (`model=softmx`, also in a sweep `-m model=softmax,softmx`) is
refused with one line that names the nearest valid name, and exit 2 (`harness.records.failures`):

    error: model.feture_dim=8 is refused: model.feture_dim is not a setting (did you mean
           model.feature_dim?)
    error: model=softmx is refused: softmx is not an option of model (did you mean model=softmax?)

A key is known when some job of the command has it: the config composed with each group
option the command line (or a preset's `hydra.sweeper.params`) selects. Hydra's own syntax
passes as it is: `hydra.*` keys and `hydra/...` groups, `+trainer.<Lightning argument>`,
`key@package`, sweeps (`a,b`, `range(...)`, `glob(...)`). What Hydra cannot parse is left to
Hydra's message, and `HYDRA_FULL_ERROR=1` skips this check (Hydra's full error instead)."""

import contextlib
import difflib
import inspect
import sys
from collections.abc import Iterable
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import HydraException
from omegaconf import OmegaConf

from common.checks import InvalidValue, require_choice
from harness.config.compose import CONF_DIR
from harness.config.framework_internals import hydra_args_parser
from harness.config.group_nodes import SOURCES, group_nodes, group_options
from harness.config.refusal import BadInput, full_error, refused

CONFIG_NAME = "config"
HYBRID, LAYERS_KEY = "hybrid", "model.layers"
"""The hybrid model's option, and its list of layers (a mixer's name, or a dict with one)."""

HYDRA_GROUPS = {"hydra", "hydra/launcher", "hydra/sweeper", "hydra/job_logging", "hydra/help"}
"""Hydra's own groups (their options include Hydra's plugins): passed as they are."""


def config_groups() -> set[str]:
    """Every config group (`model`, `hydra/launcher`, ...): folders under conf/, and Hydra's."""
    return set(group_options()) | HYDRA_GROUPS


def overrides_in(argv: list[str]) -> list[str] | None:
    """The overrides of a command line (`sys.argv[1:]`), or None when this check does not
    apply: another config (`--config-name`, `--config-path`, `--config-dir`), shell completion,
    or arguments Hydra's parser itself refuses (its usage error says what)."""
    args, unknown = hydra_args_parser().parse_known_args(argv)
    if unknown or args.config_name or args.config_path or args.config_dir:
        return None
    if args.shell_completion or args.hydra_help:
        return None
    return list(args.overrides)


def override_values(override: Override) -> list[Any] | None:
    """The values an override gives its key (each of a sweep's), None for a `glob(...)` or a
    sweep this module cannot list (`interval(...)`, for other sweepers)."""
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        return None
    if not override.is_sweep_override():
        return [override.value()]
    try:
        return list(override.sweep_string_iterator())
    except (HydraException, TypeError, ValueError):
        return None


def check_group_option(override: Override, options: dict[str, list[str]]) -> None:
    """Refuse an option a group does not have, with the nearest one."""
    group = override.key_or_group
    for value in override_values(override) or []:
        if value is None or str(value) in options[group]:
            continue
        close = difflib.get_close_matches(str(value), options[group], n=1, cutoff=0.5)
        prefix = "+" if override.is_add() else ""
        hint = f"did you mean {prefix}{group}={close[0]}?" if close else "options: "
        hint += "" if close else ", ".join(options[group])
        raise BadInput(
            f"{override.input_line} is refused: {value} is not an option of {group} ({hint})"
        )


def check_layer_names(override: Override, options: dict[str, list[str]]) -> None:
    """Refuse a hybrid's layer (`model.layers=[deltanett,softmax]`) whose mixer is not a
    model option, with the nearest one, as the model itself would after torch is imported."""
    mixers = [name for name in options["model"] if name != HYBRID]
    for layers in override_values(override) or []:
        for i, entry in enumerate(layers if isinstance(layers, list) else []):
            name = entry.get("name") if isinstance(entry, dict) else entry
            try:
                require_choice(f"model.layers[{i}].name", name, mixers)
            except InvalidValue as error:
                raise BadInput(str(error)) from error


def choices(parsed: list[Override], options: dict[str, list[str]]) -> dict[str, list[Any]]:
    """The options each group override of the command line selects (all of a sweep's)."""
    out: dict[str, list[Any]] = {}
    for override in parsed:
        if override.key_or_group in options and not override.is_delete():
            out[override.key_or_group] = override_values(override) or []
    return out


Composed = tuple[set[str], dict[str, list[str]]]
"""A config's keys (dotted, containers included) and the group sweeps of its preset."""


def compose_keys(selected: dict[str, Any]) -> Composed | None:
    """Every key (dotted, containers included) of the config with these group options, and
    the group sweeps of its `hydra.sweeper.params` (a preset's); None when it does not
    compose (Hydra then says why)."""
    overrides = [f"{group}={'null' if v is None else v}" for group, v in selected.items()]
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose(CONFIG_NAME, overrides=overrides, return_hydra_config=True)
    except Exception:  # noqa: BLE001 - a config that does not compose is Hydra's to report
        return None
    tree = OmegaConf.to_container(cfg, resolve=False)
    params = tree["hydra"]["sweeper"].get("params") or {}
    keys: set[str] = set()

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                keys.add(f"{prefix}{key}")
                walk(value, f"{prefix}{key}.")

    walk({key: value for key, value in tree.items() if key != "hydra"}, "")
    return keys, {str(key): str(value).split(",") for key, value in params.items()}


def job_variants(selected: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The group options of the command's jobs, one group varied at a time: the first option
    of every group sweep, and each other option of one group in turn."""
    base = {group: values[0] for group, values in selected.items() if values}
    others = [{**base, g: value} for g, values in selected.items() for value in values[1:]]
    return [base, *others]


def known_keys(selected: dict[str, list[Any]], options: dict[str, list[str]]) -> set[str]:
    """The keys some job of the command has: the config of each of `job_variants`; then, for
    a preset that sweeps a group the command line leaves alone, with each of its options."""
    variants, seen, keys = job_variants(selected), [], set()
    while variants:
        variant = variants.pop(0)
        if variant in seen:
            continue
        seen.append(variant)
        composed = compose_keys(variant)
        if composed is None:
            continue
        keys |= composed[0]
        for group, values in composed[1].items():
            if group in options and group not in selected:
                variants += [{**variant, group: value} for value in values]
    return keys


def keys_elsewhere(
    group: str, selected: dict[str, list[Any]], options: dict[str, list[str]]
) -> dict[str, list[str]]:
    """The keys of the other options of `group` (`model.feature_dim` of model=based, favor,
    ...): key -> the options that have it. A registered class's keys are its node's
    (`harness.config.group_nodes`); another group's option is composed."""
    base = job_variants(selected)[0]
    chosen = set(selected.get(group) or [])
    nodes = group_nodes(group) if group in SOURCES else {}
    having: dict[str, list[str]] = {}
    for option in [o for o in options.get(group, []) if o not in chosen]:
        if option in nodes:
            keys = {f"{group}.{key}" for key in nodes[option]}
        else:
            keys = (compose_keys({**base, group: option}) or (set(), {}))[0]
        for key in sorted(k for k in keys if k.startswith(f"{group}.")):
            having.setdefault(key, []).append(option)
    return having


def check_key(
    override: Override,
    known: set[str],
    selected: dict[str, list[Any]],
    options: dict[str, list[str]],
) -> None:
    """Refuse a key no job has with the nearest known one, or the options of its group that
    have it (`model.feature_dim` with model=softmax); `+key` for a key nothing reads, or for
    one the config has (set it without `+`)."""
    key, line, groups = override.key_or_group, override.input_line, config_groups()
    if key.split(".", 1)[0] == "hydra" or key in groups:
        return
    if override.is_add() and key in known:
        value = line.split("=", 1)[-1]
        raise BadInput(f"{line} is refused: {key} is a setting (set it: {key}={value})")
    if key in known:
        return
    if key.startswith("model.layers."):
        example = "'model.layers=[gated_deltanet,{name:softmax,n_heads:4}]'"
        raise BadInput(f"{line} is refused: a hybrid's layer is set in its entry: {example}")
    group = nearest_name(key.split(".", 1)[0], options)
    elsewhere = keys_elsewhere(group, selected, options) if group in options else {}
    if key in elsewhere:
        having = ", ".join(elsewhere[key])
        raise BadInput(f"{line} is refused: {key} is a setting of {group}={having} only")
    if override.is_add() or override.is_force_add():
        check_added_keys([line], known, groups, elsewhere)
        return
    hint = did_you_mean(key, known, elsewhere)
    if not override.is_delete():
        with contextlib.suppress(BadInput):  # a Lightning argument, which only `+` adds
            check_added_keys([f"+{line}"], known, groups)
            hint = f"(a Lightning argument: add it with +{line})"
    raise BadInput(f"{line} is refused: {key} is not a setting {hint}")


def lightning_arguments() -> set[str]:
    """The arguments of Lightning's `Trainer`, which `+trainer.<name>=...` may add (Lightning
    is imported here, for a `+trainer.` key only: the rest of the command line is checked
    without it)."""
    import lightning as L

    return set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}


def check_added_keys(
    overrides: Iterable[str],
    known: set[str],
    groups: set[str],
    elsewhere: dict[str, list[str]] | None = None,
) -> None:
    """Refuse `+key=value` (and `++key=value`) for a key the harness does not read: Hydra would
    add it to the config, change the config hash, and nothing would use it.

    `known`: every key of the config composed without these overrides; `groups`: the config
    groups (`model`, `hydra/launcher`, ...), which `+group=option` may add; `elsewhere`: keys
    of other options of a group (`did_you_mean`). Keys under `hydra.` are Hydra's;
    `trainer.<name>` may add any argument of Lightning's `Trainer`."""
    for override in overrides:
        if not override.startswith("+"):
            continue
        key = override.lstrip("+").split("=", 1)[0].split("@", 1)[0]
        group, _, name = key.partition(".")
        if key in known or key in groups or group == "hydra":
            continue
        if group == "trainer" and name in lightning_arguments():
            continue
        hint = did_you_mean(key, known, elsewhere)
        raise BadInput(f"{override} is refused: {key} is not a setting {hint}")


SYNONYMS = {
    "learning_rate": "lr",
    "wd": "weight_decay",
    "clip": "grad_clip",
    "gradient_clip_val": "grad_clip",
    "warmup": "warmup_fraction",
    "steps": "max_steps",
    "num_steps": "max_steps",
    "max_iters": "max_steps",
    "batch": "batch_size",
    "bs": "batch_size",
    "num_heads": "n_heads",
    "heads": "n_heads",
    "hidden_size": "d_model",
    "num_layers": "n_layers",
    "layers": "n_layers",
    "vocab": "vocab_size",
    "length": "seq_len",
    "seqlen": "seq_len",
    "max_seq_len": "seq_len",
    "kv_pairs": "num_kv_pairs",
    "n_kv_pairs": "num_kv_pairs",
}
"""Names other codebases give a setting (Hugging Face, Lightning, nanoGPT), and the harness's."""


def synonym(name: str) -> str | None:
    """The harness's name for `name` or for the well-known name nearest to it
    (`learning_rte` -> `lr`), None when it is none of them."""
    match = difflib.get_close_matches(name, sorted(SYNONYMS), n=1, cutoff=0.8)
    return SYNONYMS[match[0]] if match else None


def nearest(key: str, known: Iterable[str]) -> list[str]:
    """The known keys that end with the same name as `key` (or as its well-known synonym:
    `optim.learning_rate` -> `optim.lr`), else the known key nearest to the whole key
    (difflib), else the key of the same group with the nearest name."""
    known = sorted(known)
    name, group = key.rsplit(".", 1)[-1], key.rpartition(".")[0]
    close = [k for k in known if k.rsplit(".", 1)[-1] == name]
    if not close and synonym(name):
        same = [k for k in known if k.rsplit(".", 1)[-1] == synonym(name)]
        close = [k for k in same if k.rpartition(".")[0] == group] or same
    if not close:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if not close:
        siblings = {k.rsplit(".", 1)[-1]: k for k in known if k.rpartition(".")[0] == group}
        close = [siblings[n] for n in difflib.get_close_matches(name, sorted(siblings), n=1)]
    group = key.split(".", 1)[0]
    fixed = nearest_name(group, {k.split(".", 1)[0] for k in known})
    if not close and "." in key and fixed != group:
        return nearest(fixed + key[len(group) :], known)  # `modle.feature_dim`
    return close


def nearest_name(name: str, names: Iterable[str]) -> str:
    """`name` if it is one of `names`, else the nearest of them (difflib), else `name`."""
    names = sorted(names)
    return name if name in names else next(iter(difflib.get_close_matches(name, names, 1)), name)


def did_you_mean(key: str, known: set[str], elsewhere: dict[str, list[str]] | None = None) -> str:
    """`(did you mean optim.lr?)` with the `nearest` known keys; else the nearest key of
    another option of the group (`elsewhere`: key -> options), and the options that have it;
    without one, where every key is listed."""
    close = nearest(key, known)
    if close:
        return f"(did you mean {' or '.join(close)}?)"
    close = nearest(key, elsewhere or {})
    if close:
        group = close[0].split(".", 1)[0]
        having = ", ".join(elsewhere[close[0]])
        return f"(did you mean {close[0]}? a setting of {group}={having})"
    return "(`python run.py --cfg job` lists every key; + only adds keys the harness reads)"


def check_overrides(overrides: list[str]) -> None:
    """Raise `BadInput` for the first name mistake of `overrides` (group options first, then
    keys); overrides Hydra cannot parse are left to Hydra."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return
    options = group_options()
    for override in parsed:
        if override.key_or_group in options and not override.is_delete():
            check_group_option(override, options)
        if override.key_or_group == LAYERS_KEY and not override.is_delete():
            check_layer_names(override, options)
    selected = choices(parsed, options)
    known = known_keys(selected, options)
    if not known:
        return  # the config itself does not compose: Hydra says why
    for override in parsed:
        check_key(override, known, selected, options)


def check_command_line(argv: list[str]) -> None:
    """Exit 2 with one line (`error: ...`) at the first name mistake of `argv`
    (`sys.argv[1:]`); nothing with `HYDRA_FULL_ERROR=1`, which shows Hydra's full error."""
    if full_error():
        return
    overrides = overrides_in(argv)
    if not overrides:
        return
    try:
        check_overrides(overrides)
    except BadInput as error:
        sys.exit(refused(error))
