"""When `robotrl launch` decides a run is over: finite roles are waited for, endless ones stopped."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from robotrl.config.load import load_config
from robotrl.launch.main import Launch, build_specs
from robotrl.launch.supervisor import State


def _launch(tmp_path: Path, *overrides: str) -> Launch:
    args = [f"run_dir={tmp_path}", "launch.actors=2", *overrides]
    cfg = load_config(args)
    return Launch(cfg, build_specs(cfg, args), Console(quiet=True))


def _set(launch: Launch, **states: State) -> None:
    for name, state in states.items():
        launch.supervisor.children[name.replace("_", "-")].state = state


def _goes_on_until(launch: Launch, **ending: State) -> str | None:
    """Checks the run goes on with its roles as they are; why it ends once the roles in ``ending`` do so."""
    assert launch._finished() is None
    _set(launch, **ending)
    return launch._finished()


def test_the_learners_budget_ends_a_run_whose_actors_run_until_stopped(tmp_path: Path):
    launch = _launch(tmp_path, "actor.episodes=0", "learner.max_groups=10")
    _set(launch, learner=State.running, actor_0=State.running, actor_1=State.running)
    assert _goes_on_until(launch, learner=State.done) == "the learner finished its update groups"


def test_finite_actors_end_the_run_and_a_finite_learner_is_waited_for(tmp_path: Path):
    launch = _launch(tmp_path, "actor.episodes=3", "learner.max_groups=10")
    _set(launch, learner=State.running, actor_0=State.done, actor_1=State.done)
    # the actors are done, but the learner's groups still count
    assert _goes_on_until(launch, learner=State.done) == "every actor finished its episodes"
    endless = _launch(tmp_path, "actor.episodes=3", "learner.max_groups=0")
    _set(endless, learner=State.running, actor_0=State.done, actor_1=State.running)
    assert _goes_on_until(endless, actor_1=State.done) == "every actor finished its episodes"


def test_a_failed_role_or_an_interrupt_ends_the_run(tmp_path: Path):
    launch = _launch(tmp_path, "actor.episodes=0", "learner.max_groups=0")
    _set(launch, learner=State.running, actor_0=State.failed, actor_1=State.running)
    assert launch._finished() == "a role failed"
    _set(launch, actor_0=State.running)
    launch._interrupts = 1
    assert launch._finished() == "interrupted"
