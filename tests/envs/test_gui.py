"""The GUI environment on a real headless Chromium.

One browser for the whole module (it takes seconds to start); each test resets to a fresh
page. Without Chromium or Playwright the browser tests skip, unless
OPENCLAW_REQUIRE_SYSTEM_DEPS=1 (CI), where a missing browser is a failure.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Iterator

import pytest

from openclaw_rl.envs.base import Action, Env, EnvError
from openclaw_rl.envs.gui import GUIEnv, find_chromium, format_element, load_tasks, scripted_action

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _missing_browser() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed (pip install playwright)"
    if find_chromium() is None:
        return "Chromium is not installed (apt-get install chromium)"
    return None


def require_browser() -> None:
    """Skip without a browser; fail instead where OPENCLAW_REQUIRE_SYSTEM_DEPS=1 (CI)."""
    missing = _missing_browser()
    if missing is not None:
        if os.environ.get("OPENCLAW_REQUIRE_SYSTEM_DEPS") == "1":
            pytest.fail(f"{missing}, and OPENCLAW_REQUIRE_SYSTEM_DEPS=1 requires it", pytrace=False)
        pytest.skip(missing)


@pytest.fixture(scope="module")
def env() -> Iterator[GUIEnv]:
    require_browser()
    gui = GUIEnv()
    yield gui
    gui.close()


def task(task_id: str):
    return next(t for t in load_tasks() if t.id == task_id)


def solve(env: GUIEnv, observation: str, steps: list[dict]) -> str:
    """Play named steps, failing on the first invalid one; returns the last observation."""
    for step in steps:
        result = env.step(scripted_action(observation, step))
        assert "error" not in result.info, (step, result.observation)
        observation = result.observation
    return observation


# -- without a browser


def test_tasks_cover_every_app_in_both_splits() -> None:
    tasks = load_tasks()
    assert len(tasks) >= 10
    assert len({t.id for t in tasks}) == len(tasks)
    assert load_tasks("train") + load_tasks("eval") == [t for s in ("train", "eval") for t in tasks if t.split == s]
    for split in ("train", "eval"):
        assert {t.data["app"] for t in load_tasks(split)} == {"form.html", "todo.html", "settings.html"}
    for t in tasks:
        assert t.data["expect"], t.id
        assert t.data["solution"][-1] == {"tool": "done"}, t.id


def test_missing_chromium_names_the_fix() -> None:
    pytest.importorskip("playwright")
    with pytest.raises(EnvError, match="apt-get install chromium"):
        GUIEnv(chromium_path="/nonexistent/chromium")


def test_missing_playwright_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # makes the import fail
    with pytest.raises(EnvError, match="pip install playwright"):
        GUIEnv()


def test_unstarted_env_refuses_step_and_closes_cleanly() -> None:
    require_browser()
    gui = GUIEnv()  # the browser starts on the first reset, so this is cheap
    with pytest.raises(RuntimeError, match="call reset"):
        gui.evaluate()
    gui.close()
    gui.close()
    with pytest.raises(RuntimeError, match="closed"):
        gui.step(Action("done"))


def test_format_element_and_scripted_action() -> None:
    assert format_element({"id": 3, "role": "textbox", "name": "Email", "value": "", "required": True}) == (
        '[3] textbox "Email" value="" required'
    )
    assert format_element({"role": "text", "name": "2 items left"}) == 'text "2 items left"'
    observation = 'Page "Todo" (/todo.html)\ntext "Add"\n[1] textbox "Add"\n[2] button "Add"'
    assert scripted_action(observation, {"tool": "click", "element": "Add"}) == Action("click", {"element": 1})
    assert scripted_action(observation, {"tool": "click", "element": "Add", "role": "button"}) == Action(
        "click", {"element": 2}
    )
    assert scripted_action(observation, {"tool": "done"}) == Action("done")
    with pytest.raises(LookupError, match="'Save'"):
        scripted_action(observation, {"tool": "click", "element": "Save"})


# -- in the browser


def test_env_follows_the_protocol(env: GUIEnv) -> None:
    assert isinstance(env, Env)
    assert env.name == "gui"
    assert [tool["function"]["name"] for tool in env.tools] == ["click", "type", "select", "done"]


def test_observation_lists_the_form_controls(env: GUIEnv) -> None:
    observation = env.reset(task("form-signup-basic"))
    lines = observation.splitlines()
    assert lines[0] == 'Page "Sign up" (/form.html)'
    for expected in [
        'heading "Create your account"',
        '[1] textbox "Full name" value="" required',
        '[2] textbox "Email" value="" required',
        '[3] combobox "Country" value="Choose a country" options=["Choose a country", "Brazil", "Canada", '
        '"France", "Germany", "India", "Japan", "United Kingdom", "United States"] required',
        'text "Plan"',
        '[4] radio "Free" checked=true',
        '[9] checkbox "I accept the terms of service" checked=false',
        '[10] button "Sign up"',
    ]:
        assert expected in lines
    assert observation.count("Full name") == 1  # a label names its control once, not again as text


def test_scripted_episode_solves_the_task(env: GUIEnv) -> None:
    env.reset(task("form-signup-basic"))
    for action in [
        Action("type", {"element": 1, "text": "Ada Lovelace"}),
        Action("type", {"element": 2, "text": "ada@example.com"}),
        Action("select", {"element": 3, "option": "United Kingdom"}),
        Action("click", {"element": "[9]"}),  # models write ids in brackets too
    ]:
        result = env.step(action)
        assert not result.done and result.info == {}, result.observation
    result = env.step(Action("click", {"element": 10}))
    assert result.observation.startswith('Clicked [10] button "Sign up".')
    assert 'text "Thanks, Ada Lovelace! Your account is ready."' in result.observation
    assert '[2] textbox "Email" value="ada@example.com" required' in result.observation
    result = env.step(Action("done"))
    assert result.done
    assert env.evaluate().success and env.evaluate().score == 1.0


def test_wrong_answer_fails_the_check_and_says_why(env: GUIEnv) -> None:
    env.reset(task("form-signup-basic"))
    for action in [
        Action("type", {"element": 1, "text": "Ada Lovelace"}),
        Action("type", {"element": 2, "text": "ada@example.org"}),
        Action("select", {"element": 3, "option": "United Kingdom"}),
        Action("click", {"element": 9}),
        Action("click", {"element": 10}),
        Action("done"),
    ]:
        env.step(action)
    outcome = env.evaluate()
    assert (outcome.success, outcome.score) == (False, 0.0)
    assert outcome.detail == 'submitted.email: expected "ada@example.com", got "ada@example.org"'


def test_validation_errors_show_and_nothing_is_submitted(env: GUIEnv) -> None:
    env.reset(task("form-signup-basic"))
    result = env.step(Action("click", {"element": 10}))
    assert 'text "Enter your full name."' in result.observation
    assert 'text "Accept the terms of service to continue."' in result.observation
    assert "submitted.name: expected \"Ada Lovelace\", got nothing" in env.evaluate().detail


def test_settings_count_only_once_saved(env: GUIEnv) -> None:
    observation = env.reset(task("settings-dark-mode"))
    observation = solve(env, observation, task("settings-dark-mode").data["solution"][:2])  # no Save
    assert '[6] switch "Email notifications" checked=false' in observation
    assert 'text "You have unsaved changes."' in observation
    assert env.evaluate().detail == (
        'saved.theme: expected "dark", got "system"; saved.emailNotifications: expected false, got true'
    )


@pytest.mark.parametrize(
    ("action", "problem"),
    [
        (Action("scroll", {"element": 1}), "unknown tool 'scroll'"),
        (Action("click", {}), "click needs the argument(s) ['element']"),
        (Action("click", {"element": 99}), "there is no element [99] on the page"),
        (Action("click", {"element": "Sign up"}), "element must be an id, the number in brackets (like 5); got 'Sign"),
        (Action("type", {"element": 10, "text": "hi"}), '[10] button "Sign up" is not a text field'),
        (Action("select", {"element": 3, "option": "Atlantis"}), "has no option 'Atlantis'; its options are ["),
        (Action("select", {"element": 1, "option": "Japan"}), '[1] textbox "Full name" is not a drop-down list'),
    ],
)
def test_invalid_actions_are_observations_not_exceptions(env: GUIEnv, action: Action, problem: str) -> None:
    env.reset(task("form-signup-basic"))
    result = env.step(action)
    assert problem in result.info["error"]
    assert result.observation.startswith(f"Error: {result.info['error']}\n\n")
    assert '[10] button "Sign up"' in result.observation  # the agent still sees the page
    assert not result.done


def test_a_failed_browser_action_is_reported(env: GUIEnv) -> None:
    env.reset(task("settings-language-page-size"))
    result = env.step(Action("type", {"element": 5, "text": "fifty"}))  # a number field
    assert result.info["error"].startswith('could not type [5] spinbutton "Items per page": ')


def test_ids_stay_stable_as_items_come_and_go(env: GUIEnv) -> None:
    observation = env.reset(task("todo-complete-one"))
    assert '[5] checkbox "Call mom" checked=false' in observation
    observation = solve(env, observation, [
        {"tool": "click", "element": "Delete Buy milk"},
        {"tool": "type", "element": "New todo", "text": "Pack bags"},
        {"tool": "click", "element": "Add"},
    ])
    assert "Buy milk" not in observation.split("\n\n", 1)[1]
    assert '[5] checkbox "Call mom" checked=false' in observation
    assert '[10] checkbox "Pack bags" checked=false' in observation  # new ids continue after the old ones
    assert '[11] button "Delete Pack bags"' in observation


def test_step_limit_ends_the_episode(env: GUIEnv) -> None:
    env.max_steps = 2
    try:
        env.reset(task("form-signup-basic"))
        assert not env.step(Action("click", {"element": 5})).done
        result = env.step(Action("click", {"element": 6}))
        assert result.done and result.info == {"truncated": True}
        assert "step limit (2)" in result.observation
        after = env.step(Action("click", {"element": 4}))
        assert after.done and after.info["error"] == "episode is over"
    finally:
        env.max_steps = 30


def test_screenshots_on_request(env: GUIEnv) -> None:
    env.reset(task("todo-add-three"))
    assert env.step(Action("click", {"element": 2})).image_png is None
    env.screenshots = True
    try:
        assert env.step(Action("click", {"element": 2})).image_png.startswith(PNG_SIGNATURE)
    finally:
        env.screenshots = False
    assert env.screenshot().startswith(PNG_SIGNATURE)


def test_usable_from_async_code(env: GUIEnv) -> None:
    # Playwright's sync API refuses to run inside an event loop; the env's worker thread must hide that.
    async def episode() -> str:
        env.reset(task("todo-add-three"))
        return env.step(Action("type", {"element": 1, "text": "from async"})).observation

    assert '[1] textbox "New todo" value="from async"' in asyncio.run(episode())


@pytest.mark.parametrize("gui_task", load_tasks(), ids=lambda t: t.id)
def test_each_task_fails_fresh_and_passes_after_its_reference_solution(env: GUIEnv, gui_task) -> None:
    observation = env.reset(gui_task)
    assert not env.evaluate().success
    solve(env, observation, gui_task.data["solution"])
    outcome = env.evaluate()
    assert outcome.success, outcome.detail
