"""One option vocabulary (sim/cli_options.py): every ``mms`` command's ``--help`` walked and checked, names and
paths resolved alike, old spellings still working with one deprecation line, did-you-mean for commands and
options, a file of the wrong kind named as such."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from hil.cli import COMMANDS, command_parser, main as mms_main
from sim.cli_options import DEPRECATED, HELP
from sim.config import ConfigError, resolve_config, shipped_config

ROOT = Path(__file__).resolve().parents[2]
#: options whose meaning in one command is not the vocabulary's, and why
OWN_MEANING = {("record", "--out"): "the MCAP file written (the folder is --run-dir)"}


def _parser(command: str) -> argparse.ArgumentParser:
    """The parser ``mms COMMAND`` builds (hil/cli.py), without running anything."""
    return command_parser(command)


def _options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every visible option string -> its help text as ``--help`` prints it (whitespace joined)."""
    helps = {}
    for action in parser._actions:
        if action.help is argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        text = " ".join(parser._get_formatter()._expand_help(action).split()) if action.help else ""
        for option in action.option_strings or [action.metavar or action.dest]:
            helps[option] = text
    return helps


@pytest.fixture(scope="module")
def helps() -> dict[str, dict[str, str]]:
    return {command: _options(_parser(command)) for command in COMMANDS}


def test_every_command_prints_its_help():
    for command in COMMANDS:
        with pytest.raises(SystemExit) as done:
            _parser(command).parse_args(["--help"])
        assert done.value.code == 0, command


def test_every_option_has_help_text_and_no_old_spelling_is_shown(helps):
    for command, options in helps.items():
        for option, text in options.items():
            assert text, f"mms {command} {option} has no help text"
        shown = set(options) & {old.split()[0] for old in DEPRECATED if " " not in old}
        assert not shown, f"mms {command} shows old spellings {shown}"


def test_a_shared_option_reads_the_same_in_every_command(helps):
    seen = {}
    for command, options in helps.items():
        for option, text in options.items():
            if option in HELP and (command, option) not in OWN_MEANING:
                assert text.startswith(HELP[option]), f"mms {command} {option}: {text!r}"
                seen.setdefault(option, []).append(command)
    # the shared options are used where the issue found them spelt apart
    assert {"serve", "drive", "dash", "record"} <= set(seen["--network"])
    assert {"sim", "sweep", "record", "export", "validate"} <= set(seen["--quiet"])
    assert {"sim", "validate"} <= set(seen["--no-plots"])
    assert {"serve", "drive", "record"} <= set(seen["--idle"]) and set(seen["--idle"]) == set(seen["--autostart"])
    assert {"sim", "serve"} <= set(seen["--integrator"])
    assert set(seen["--rt-priority"]) == {"serve", "drive", "emulate", "demo"}


def test_robots_and_rigs_take_the_same_names_and_help_everywhere(helps):
    robot_helps = {text.split(" or a robot TOML file")[0] for options in helps.values()
                   for option, text in options.items() if option in ("config", "--robot", "--sim")}
    rig_helps = {text.split(" or a rig TOML file")[0] for options in helps.values()
                 for option, text in options.items() if option == "--rig"}
    assert robot_helps == {"robot: a shipped name (biped, clemens, dead-fish, earthworm, fish, flapper, "
                           "flapper-flexible, flapper2link, inchworm, pendulum, raybot, snake2d, snake3d)"}
    assert rig_helps == {"rig: a shipped name (flapper, flapper-dynamixel, raybot, snake-dynamixel)"}
    assert {c for c, o in helps.items() if "--rig" in o} == {"emulate", "drive", "dash", "record", "validate", "demo",
                                                         "identify", "serve"}


def test_a_name_and_its_path_resolve_to_the_same_file():
    flapper = ROOT / "configs" / "robots" / "flapper.toml"
    assert resolve_config("robot", "flapper").samefile(flapper)
    assert resolve_config("robot", str(flapper)) == flapper
    for name in ("flapper-dynamixel", "flapper_dynamixel", "flapper_dynamixel_rig", "flapper_dynamixel_rig.toml"):
        assert resolve_config("rig", name).samefile(ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml")
    assert shipped_config("network", "network").samefile(ROOT / "configs" / "network.toml")
    with pytest.raises(ConfigError, match=r"^flaper: file not found, and not a shipped robot name \(names: biped, clemens, "
                                          r"dead-fish, earthworm, fish, flapper, flapper-flexible, flapper2link, "
                                          r"inchworm, pendulum, raybot, snake2d, snake3d\); did you mean flapper or flapper2link\?$"):
        resolve_config("robot", "flaper")
    with pytest.raises(ConfigError, match="this is a rig file .*, not a robot file"):
        resolve_config("robot", str(ROOT / "configs" / "rigs" / "raybot_rig.toml"))
    with pytest.raises(ConfigError, match="this is a robot file .*, not a network file"):
        resolve_config("network", str(flapper))


def _mms(capsys, *args: str) -> tuple[int, str]:
    """``mms ARGS`` in this process: (exit code, stderr)."""
    try:
        code = mms_main(list(args))
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def test_mms_version_and_did_you_mean_for_commands_and_options(capsys):
    assert mms_main(["--version"]) == 0
    assert re.fullmatch(r"mms \S+\n", capsys.readouterr().out)
    assert mms_main(["smi"]) == 2
    assert capsys.readouterr().err.startswith("mms: unknown command 'smi'; did you mean sim?\n")
    with pytest.raises(SystemExit) as done:
        mms_main(["sim", "flapper", "--duraton", "1"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1
    assert err.startswith("mms sim: error: unrecognized arguments: --duraton 1; did you mean --duration?")


@pytest.mark.parametrize("args,says", [
    (["sim", "configs/rigs/flapper_rig.toml"], "configs/rigs/flapper_rig.toml: this is a rig file "
                                                '([rig] kind "mcu"), not a robot file'),
    (["serve", "raybot_rig"], "raybot_rig: file not found, and not a shipped robot name"),
    (["drive", "--rig", "configs/robots/flapper.toml"], 'this is a robot file ([robot] kind "flapper"), not a rig'),
    (["record", "--network", "configs/rigs/raybot_rig.toml"], "this is a rig file"),
])
def test_a_wrong_file_or_name_is_one_line_before_anything_runs(capsys, monkeypatch, args, says):
    monkeypatch.chdir(ROOT)
    code, err = _mms(capsys, *args)
    assert code == 2 and err.count("\n") == 1 and says in err, err


@pytest.mark.parametrize("command,old,new,dest,value", [
    (["drive", "--rig", "flapper"], ["--config", "configs/network.toml"], "--network", "network",
     Path("configs/network.toml")),
    (["dash"], ["--config", "configs/network.toml"], "--network", "network", Path("configs/network.toml")),
    (["record"], ["--config", "configs/network.toml"], "--network", "network", Path("configs/network.toml")),
    (["export", "x.mcap", "--to", "csv"], ["--no-progress"], "--quiet", "quiet", True),
    (["validate", "x.mcap"], ["--no-progress"], "--quiet", "quiet", True),
    (["serve", "pendulum"], ["--paused"], "--idle", "autostart", False),
    (["record"], ["--wait"], "--idle", "autostart", False),
    (["drive", "--rig", "flapper"], ["--autoactivate"], "--autostart", "autostart", True),
])
def test_an_old_spelling_works_with_one_deprecation_line(capsys, monkeypatch, command, old, new, dest, value):
    monkeypatch.chdir(ROOT)
    default = vars(_parser(command[0]).parse_args(command[1:]))[dest]
    assert default != value and capsys.readouterr().err == ""
    args = _parser(command[0]).parse_args(command[1:] + old)
    assert getattr(args, dest) == value
    assert capsys.readouterr().err == (f"mms {command[0]}: {old[0]} is deprecated and will be removed in the next "
                                       f"release: use {new}\n")


def test_validate_plots_none_is_no_plots_with_a_deprecation_line(capsys, tmp_path):
    code, err = _mms(capsys, "validate", str(tmp_path / "missing.mcap"), "--plots", "none", "--quiet")
    assert code == 2 and err.splitlines()[0] == ("mms validate: --plots none is deprecated and will be removed in the "
                                             "next release: use --no-plots")
