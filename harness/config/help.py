"""`python run.py --help`: the page of conf/hydra/help/recall.yaml (also Hydra's custom help,
`hydra.help`), printed by `answer_help` from one composition of the command's config. Hydra's
own `--help` lists the groups by composing the config once per group (seconds with this many
state sizes); here they are read from conf/'s folders. The presets carry the first line of
each one's description (`${presets:}`, a resolver registered by `register_help`)."""

import string
import sys
from collections.abc import Sequence

from omegaconf import OmegaConf

from harness.config.compose import CONF_DIR

WIDTH = 96
"""Characters of a preset's line in the help page."""


def description(text: str) -> str:
    """The first line of a config file's leading comment, `# @package` lines left out, without
    its closing `:` or `,`."""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        line = line.lstrip("#").strip()
        if line and not line.startswith("@package"):
            return line.rstrip(":,")
    return ""


def preset_lines(width: int = WIDTH) -> str:
    """One line per preset of conf/experiment: `  name  description`, cut to `width`."""
    presets = sorted((CONF_DIR / "experiment").glob("*.yaml"))
    pad = max((len(p.stem) for p in presets), default=0)
    lines = []
    for path in presets:
        line = f"  {path.stem:<{pad}}  {description(path.read_text())}".rstrip()
        lines.append(line if len(line) <= width else line[: width - 3].rsplit(" ", 1)[0] + "...")
    return "\n".join(lines)


def register_help() -> None:
    """The `${presets:}` resolver of the help page (idempotent)."""
    OmegaConf.register_new_resolver("presets", preset_lines, replace=True)


HELP_FLAGS = ("--help", "-h")


def group_lines() -> str:
    """`group: option, option, ...` for every group of conf/ outside hydra/, sorted
    (`harness.config.group_nodes.group_options`)."""
    from harness.config.group_nodes import group_options
    from harness.config.state_sizes import equal_state_lines

    groups = [f"{group}: {', '.join(options)}" for group, options in group_options().items()]
    equal = "state_size options at equal state (equal R, floats within 10%; the report pairs them):"
    return "\n".join([*groups, equal, equal_state_lines()])


def help_page(overrides: Sequence[str] = ()) -> str:
    """The help page for a command line's `overrides` (its choices fill "This command
    selects"): the template of `hydra.help` with `$APP_CONFIG_GROUPS` from conf/'s folders."""
    from hydra import compose, initialize_config_dir

    register_help()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    template = string.Template(cfg.hydra.help.template)
    return template.safe_substitute(APP_CONFIG_GROUPS=group_lines())


def answer_help(arguments: Sequence[str]) -> None:
    """Print the help page and exit 0 where the command line asks for it (`--help`, `-h`)."""
    if any(a in HELP_FLAGS for a in arguments):
        overrides = [a for a in arguments if not a.startswith("-")]
        print(help_page(overrides))
        sys.exit(0)
