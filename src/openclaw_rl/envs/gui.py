"""The GUI environment: a real headless Chromium on small local web apps (docs/method.md §4).

The apps (a sign-up form, a todo list, a settings page) are plain HTML + JS shipped in
`envs/tasks/gui/`, served from memory on 127.0.0.1 by a stdlib server in a thread. The
tasks, with their goal checks and reference solutions, are in `envs/tasks/gui.json`.

Decisions and why:

- The observation is an accessibility tree built by our own script in the page, not
  Playwright's `aria_snapshot()`. The agent must name what it acts on, and the public
  snapshot has no handles for that (Playwright's ref-annotated snapshot is private API).
  Our script tags each control with a `data-oc-id` attribute the first time it sees it, so
  an element keeps its id for the whole episode, even as other items come and go. Only
  controls get ids (`[3] textbox "Email" value=""`); headings and text are listed without
  one, because there is nothing to do with them.
- Names follow the ARIA rules our apps use: aria-label, aria-labelledby, <label>, the
  button's text, placeholder. Text that serves as a control's name is not repeated.
- `type` replaces a field's content (Playwright's `fill`), so typing the same thing twice is
  harmless; `select` takes an option's label as listed; `click` works on anything with an id.
- The goal is checked from the page: each task lists `expect`, dotted paths into the app's
  `window.appState` with the values they must hold. Scores are all or nothing: partial
  credit would reward the fields a fresh page already gets right.
- All Playwright calls run on one worker thread per environment. Playwright's sync API is
  tied to the thread that started it and refuses to run inside an asyncio loop; with its
  own thread the environment can be driven from any thread, async code included.
- One browser per environment, started on the first reset and reused; a new browser
  context (fresh cookies, storage, page) per episode. Chromium is the system's (Debian's
  `chromium`), never a Playwright download: the machines have no internet.

(Over 400 lines: the page script that builds the observation lives here, next to the
Python that formats and acts on its records, so the observation format is defined in one
place.)
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, TypeVar

from openclaw_rl.envs.base import Action, EnvError, Outcome, Split, StepResult, Task, tool_schema

__all__ = ["GUIEnv", "find_chromium", "load_tasks", "scripted_action"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Without the background-networking flags Chromium keeps dialling Google services, and on
# a closed network every refused connection is retried; --no-sandbox because we may run as root.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
EDITABLE_ROLES = {"textbox", "searchbox", "spinbutton"}
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}

TOOLS = [
    tool_schema("click", "Click an element: a button, a checkbox, a radio button, a switch, a link.",
                element=("integer", "the element's id, the number in brackets")),
    tool_schema("type", "Replace the text of a text field with `text`.",
                element=("integer", "the text field's id, the number in brackets"),
                text=("string", "the text the field should hold")),
    tool_schema("select", "Choose an option of a drop-down list (combobox).",
                element=("integer", "the combobox's id, the number in brackets"),
                option=("string", "the option's label, as listed in options=[...]")),
    tool_schema("done", "Say that the task is finished; the page is then checked."),
]

# Walks the visible DOM in order and returns one record per control, heading or text.
# Controls are tagged with data-oc-id the first time they are seen, so ids are stable.
_SNAPSHOT_JS = r"""
() => {
  if (window.__ocNextId === undefined) window.__ocNextId = 1;
  const CONTROLS = new Set(["textbox", "searchbox", "spinbutton", "combobox", "checkbox", "radio",
                            "switch", "button", "link", "slider", "tab", "menuitem"]);
  const clean = (text) => (text || "").replace(/\s+/g, " ").trim();
  const namingIds = new Set();
  for (const el of document.querySelectorAll("[aria-labelledby]"))
    for (const ref of el.getAttribute("aria-labelledby").split(/\s+/)) namingIds.add(ref);
  const textWithoutControls = (el) => {
    const copy = el.cloneNode(true);
    for (const inner of copy.querySelectorAll("input, select, textarea, button")) inner.remove();
    return clean(copy.textContent);
  };
  const roleOf = (el) => {
    const explicit = el.getAttribute("role");
    if (explicit) return explicit;
    const tag = el.tagName.toLowerCase();
    if (tag === "input") {
      const type = (el.getAttribute("type") || "text").toLowerCase();
      if (type === "hidden") return null;
      if (type === "checkbox" || type === "radio") return type;
      if (type === "number") return "spinbutton";
      if (type === "search") return "searchbox";
      if (type === "range") return "slider";
      if (["submit", "button", "reset", "image"].includes(type)) return "button";
      return "textbox";
    }
    if (tag === "textarea") return "textbox";
    if (tag === "select") return "combobox";
    if (tag === "button") return "button";
    if (tag === "a" && el.hasAttribute("href")) return "link";
    if (/^h[1-6]$/.test(tag)) return "heading";
    return null;
  };
  const nameOf = (el, role) => {
    if (el.getAttribute("aria-label")) return clean(el.getAttribute("aria-label"));
    if (el.getAttribute("aria-labelledby"))
      return clean(el.getAttribute("aria-labelledby").split(/\s+/)
        .map((id) => (document.getElementById(id) || {}).textContent || "").join(" "));
    if (el.labels && el.labels.length) return clean([...el.labels].map(textWithoutControls).join(" "));
    if (el.tagName === "INPUT" && role === "button") return clean(el.value);
    if (["button", "link", "heading", "switch", "tab", "menuitem"].includes(role)) {
      const text = clean(el.innerText);
      if (text) return text;
    }
    return clean(el.getAttribute("placeholder") || el.getAttribute("title"));
  };
  const describe = (el, role) => {
    if (!el.hasAttribute("data-oc-id")) el.setAttribute("data-oc-id", String(window.__ocNextId++));
    const record = { id: Number(el.getAttribute("data-oc-id")), role, name: nameOf(el, role) };
    if (["textbox", "searchbox", "spinbutton", "slider"].includes(role)) record.value = el.value;
    if (role === "combobox" && el.tagName === "SELECT") {
      record.value = el.selectedIndex >= 0 ? clean(el.options[el.selectedIndex].text) : "";
      record.options = [...el.options].map((option) => clean(option.text));
    }
    if (role === "checkbox" || role === "radio") record.checked = el.checked;
    if (role === "switch") record.checked = el.getAttribute("aria-checked") === "true";
    if (el.disabled || el.getAttribute("aria-disabled") === "true") record.disabled = true;
    if (el.required) record.required = true;
    return record;
  };
  const out = [];
  const visit = (el) => {
    if (el.getAttribute("aria-hidden") === "true" || !el.checkVisibility({ checkVisibilityCSS: true })) return;
    if (["SCRIPT", "STYLE", "TEMPLATE", "NOSCRIPT", "OPTION"].includes(el.tagName)) return;
    const role = roleOf(el);
    if (CONTROLS.has(role)) { out.push(describe(el, role)); return; }
    if (role === "heading") { out.push({ role, name: clean(el.innerText) }); return; }
    if (el.tagName === "LABEL" && el.control) {  // a control's name: said once, on the control
      for (const child of el.children) visit(child);
      return;
    }
    if (namingIds.has(el.id)) return;
    const hasControls = el.querySelector("input, select, textarea, button, a[href], [role], h1, h2, h3, h4, h5, h6");
    if (!hasControls) {  // innerText breaks lines at block boundaries: one line per list item, paragraph
      for (const line of el.innerText.split("\n")) if (clean(line)) out.push({ role: "text", name: clean(line) });
      return;
    }
    for (const node of el.childNodes) {
      if (node.nodeType === Node.ELEMENT_NODE) visit(node);
      else if (node.nodeType === Node.TEXT_NODE && clean(node.textContent))
        out.push({ role: "text", name: clean(node.textContent) });
    }
  };
  visit(document.body);
  return out;
}
"""

_APP_STATE_JS = "() => window.appState === undefined ? null : JSON.parse(JSON.stringify(window.appState))"
_LINE = re.compile(r'^\[(\d+)\] (\S+) ("(?:[^"\\]|\\.)*")')


# -- tasks ------------------------------------------------------------------------------


def _tasks_dir() -> resources.abc.Traversable:
    return resources.files("openclaw_rl.envs").joinpath("tasks")


@cache
def _all_tasks() -> tuple[Task, ...]:
    records = json.loads(_tasks_dir().joinpath("gui.json").read_text(encoding="utf-8"))
    apps = {entry.name for entry in _tasks_dir().joinpath("gui").iterdir()}
    tasks = []
    for record in records:
        where = f"GUI task {record.get('id')!r} in envs/tasks/gui.json"
        missing = {"id", "prompt", "split", "app", "expect", "solution"} - set(record)
        if missing:
            raise ValueError(f"{where} lacks {sorted(missing)}; every task needs them")
        if record["app"] not in apps:
            raise ValueError(f"{where} names app {record['app']!r}, which is not one of {sorted(apps)}")
        if record["split"] not in ("train", "eval"):
            raise ValueError(f"{where} has split {record['split']!r}; use 'train' or 'eval'")
        data = {key: record[key] for key in ("app", "expect", "solution")} | {"seed": record.get("seed")}
        tasks.append(Task(record["id"], record["prompt"], record["split"], data))
    return tuple(tasks)


def load_tasks(split: Split | None = None) -> list[Task]:
    """The GUI tasks, all or one split; no browser needed."""
    return [task for task in _all_tasks() if split is None or task.split == split]


# -- the app server ---------------------------------------------------------------------


class _AppServer:
    """Serves the bundled apps from memory on 127.0.0.1 at a free port, in a daemon thread."""

    def __init__(self) -> None:
        files = {
            "/" + entry.name: entry.read_bytes()
            for entry in _tasks_dir().joinpath("gui").iterdir()
            if entry.name.endswith(tuple(_CONTENT_TYPES))
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                path = urllib.parse.urlsplit(self.path).path
                body = files.get(path)
                if body is None:
                    self.send_error(404, f"no app at {path}")
                    return
                self.send_response(200)
                self.send_header("Content-Type", _CONTENT_TYPES["." + path.rsplit(".", 1)[-1]])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # the library stays quiet
                log.debug("app server: " + format, *args)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="gui-apps", daemon=True)
        self._thread.start()

    def url(self, app: str, seed: dict[str, Any] | None = None) -> str:
        query = "?" + urllib.parse.urlencode({"seed": json.dumps(seed)}) if seed else ""
        return f"http://127.0.0.1:{self._server.server_port}/{app}{query}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- observations -----------------------------------------------------------------------


def find_chromium(path: str | None = None) -> str | None:
    """The Chromium executable: `path` if it exists, else the first of CHROMIUM_NAMES on PATH."""
    if path is not None:
        return shutil.which(path)
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def format_element(record: dict[str, Any]) -> str:
    """One observation line: `[3] textbox "Email" value="" required`; no id for text."""
    line = f"{record['role']} {json.dumps(record['name'], ensure_ascii=False)}"
    if "id" in record:
        line = f"[{record['id']}] {line}"
    if "value" in record:
        line += f" value={json.dumps(record['value'], ensure_ascii=False)}"
    if "options" in record:
        line += f" options={json.dumps(record['options'], ensure_ascii=False)}"
    if "checked" in record:
        line += f" checked={str(record['checked']).lower()}"
    line += "".join(f" {flag}" for flag in ("disabled", "required") if record.get(flag))
    return line


def scripted_action(observation: str, step: dict[str, Any]) -> Action:
    """Turn a reference-solution step, which names its element, into an Action with the id.

    `step` is like {"tool": "type", "element": "Email", "text": "ada@example.com"}; the
    element is the first one in `observation` with that exact name (and "role", if given).
    """
    arguments = {key: value for key, value in step.items() if key not in ("tool", "element", "role")}
    if "element" not in step:
        return Action(step["tool"], arguments)
    for line in observation.splitlines():
        match = _LINE.match(line)
        if match and json.loads(match[3]) == step["element"] and step.get("role", match[2]) == match[2]:
            return Action(step["tool"], {"element": int(match[1]), **arguments})
    raise LookupError(f"no element named {step['element']!r} in the observation:\n{observation}")


_MISSING = object()


def _lookup(state: Any, path: str) -> Any:
    for key in path.split("."):
        if isinstance(state, dict) and key in state:
            state = state[key]
        elif isinstance(state, list) and key.isdigit() and int(key) < len(state):
            state = state[int(key)]
        else:
            return _MISSING
    return state


def _differences(path: str, actual: Any, expected: Any) -> list[str]:
    """Where `actual` differs from `expected`, one line per differing leaf of nested objects.

    Compared as canonical JSON, so that true never equals 1 and key order never matters.
    """
    if isinstance(actual, dict) and isinstance(expected, dict):
        keys = list(expected) + [key for key in actual if key not in expected]
        return [
            line
            for key in keys
            for line in _differences(f"{path}.{key}", actual.get(key, _MISSING), expected.get(key, _MISSING))
        ]
    canonical = [json.dumps(value, sort_keys=True) for value in (actual, expected) if value is not _MISSING]
    if len(canonical) == 2 and canonical[0] == canonical[1]:
        return []
    return [f"{path}: expected {_show(expected)}, got {_show(actual)}"]


def _show(value: Any) -> str:
    return "nothing" if value is _MISSING else json.dumps(value, ensure_ascii=False)


# -- the environment --------------------------------------------------------------------


class GUIEnv:
    """Headless Chromium on the bundled web apps, observed as an accessibility tree."""

    name = "gui"
    tools = TOOLS

    def __init__(
        self,
        *,
        max_steps: int = 30,
        screenshots: bool = False,
        chromium_path: str | None = None,
        action_timeout_s: float = 3.0,
        viewport: tuple[int, int] = (1024, 768),
    ) -> None:
        """Check the dependencies now; the browser itself starts on the first reset.

        max_steps: steps per episode; the step that reaches it ends the episode (truncated).
        screenshots: attach a PNG of the page to every StepResult (`image_png`).
        action_timeout_s: how long a click or fill may wait for its element to be ready.
        """
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        # here, not at the top: the module (its tools, its tasks) loads without Playwright, and a
        # missing one is an EnvError that names the fix, not an ImportError at registry lookup
        try:
            from playwright.sync_api import Error, sync_playwright
        except ImportError as error:
            raise EnvError(
                "the GUI environment needs Playwright for Python: pip install playwright "
                "(no `playwright install`: it drives the system Chromium)"
            ) from error
        executable = find_chromium(chromium_path)
        if executable is None:
            where = repr(chromium_path) if chromium_path else f"any of {list(CHROMIUM_NAMES)} on PATH"
            raise EnvError(f"the GUI environment needs Chromium, and found none at {where}: apt-get install chromium")
        self.executable = executable
        self._sync_playwright = sync_playwright
        self._browser_error: type[Exception] = Error
        self.max_steps = max_steps
        self.screenshots = screenshots
        self.action_timeout_s = action_timeout_s
        self.viewport = viewport
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gui-env")
        self._server: _AppServer | None = None
        self._playwright: Any = None
        self._browser: Any = None
        self._context: Any = None
        self._page: Any = None
        self._task: Task | None = None
        self._steps = 0
        self._done = False

    # -- the protocol

    def tasks(self, split: Split | None = None) -> list[Task]:
        return load_tasks(split)

    def reset(self, task: Task) -> str:
        return self._call(self._reset, task, timeout_s=60.0)

    def step(self, action: Action) -> StepResult:
        return self._call(self._step, action)

    def evaluate(self) -> Outcome:
        return self._call(self._evaluate)

    def screenshot(self) -> bytes:
        """A PNG of the page as it is now (e.g. to go with the observation reset returned)."""
        return self._call(lambda: self._live_page().screenshot(type="png"))

    def close(self) -> None:
        """Shut the browser and the app server; safe to call twice."""
        if self._worker is None:
            return
        try:
            self._call(self._shutdown)
        finally:
            self._worker.shutdown(wait=True)
            self._worker = None

    def __enter__(self) -> GUIEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- on the worker thread

    def _call(self, function: Callable[..., T], *args: Any, timeout_s: float = 30.0) -> T:
        if self._worker is None:
            raise RuntimeError("this GUIEnv is closed; make a new one")
        future = self._worker.submit(function, *args)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout as error:
            raise EnvError(f"the browser did not answer within {timeout_s:.0f} s") from error
        except self._browser_error as error:  # the agent's mistakes never get here: see _act
            raise EnvError(f"the browser failed: {str(error).splitlines()[0]}") from error

    def _start(self) -> None:
        self._server = _AppServer()
        self._playwright = self._sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=self.executable, headless=True, args=CHROMIUM_ARGS
            )
        except Exception as error:
            self._shutdown()
            raise EnvError(f"could not start Chromium at {self.executable}: {error}") from error
        log.info("GUI env: Chromium %s, apps on %s", self._browser.version, self._server.url(""))

    def _reset(self, task: Task) -> str:
        if self._browser is None:
            self._start()
        if self._context is not None:
            self._context.close()
        width, height = self.viewport
        self._context = self._browser.new_context(viewport={"width": width, "height": height})
        self._page = self._context.new_page()
        self._page.set_default_timeout(self.action_timeout_s * 1000)
        self._page.goto(self._server.url(task.data["app"], task.data.get("seed")), timeout=15_000)
        self._task, self._steps, self._done = task, 0, False
        return self._observe()

    def _live_page(self) -> Any:
        if self._page is None:
            raise RuntimeError("no episode yet: call reset(task) first")
        return self._page

    def _snapshot(self) -> list[dict[str, Any]]:
        return self._live_page().evaluate(_SNAPSHOT_JS)

    def _observe(self) -> str:
        page = self._live_page()
        records = self._snapshot()
        path = urllib.parse.urlsplit(page.url).path
        header = f"Page {json.dumps(page.title(), ensure_ascii=False)} ({path})"
        return "\n".join([header, *map(format_element, records)])

    def _step(self, action: Action) -> StepResult:
        page = self._live_page()
        if self._done:
            return StepResult(
                "Error: the episode is over; reset to start another.", True, {"error": "episode is over"}
            )
        self._steps += 1
        error, summary = None, ""
        if action.tool == "done":
            self._done = True
            summary = "Done: the page will now be checked."
        else:
            try:
                summary = self._act(action)
            except _BadAction as bad:
                error = str(bad)
            page.wait_for_load_state("domcontentloaded")  # should a click have started a navigation
        observation = self._observe()
        info: dict[str, Any] = {}
        if error is not None:
            info["error"] = error
            observation = f"Error: {error}\n\n{observation}"
        elif summary:
            observation = f"{summary}\n\n{observation}"
        if not self._done and self._steps >= self.max_steps:
            self._done = True
            info["truncated"] = True
            observation += f"\n\nThe step limit ({self.max_steps}) is reached; the episode is over."
        image = page.screenshot(type="png") if self.screenshots else None
        return StepResult(observation, self._done, info, image)

    def _act(self, action: Action) -> str:
        """Do one click/type/select; raise _BadAction, naming the problem, when it cannot be done."""
        needs = {"click": ("element",), "type": ("element", "text"), "select": ("element", "option")}
        if action.tool not in needs:
            raise _BadAction(f"unknown tool {action.tool!r}; the tools are click, type, select and done")
        missing = [key for key in needs[action.tool] if key not in action.arguments]
        if missing:
            raise _BadAction(f"{action.tool} needs the argument(s) {missing}; got {sorted(action.arguments)}")
        element_id = _element_id(action.arguments["element"])
        record = next((r for r in self._snapshot() if r.get("id") == element_id), None)
        if record is None:
            raise _BadAction(
                f"there is no element [{element_id}] on the page; use an id in brackets from the latest observation"
            )
        target = f"[{element_id}] {record['role']} {json.dumps(record['name'], ensure_ascii=False)}"
        if record.get("disabled"):
            raise _BadAction(f"{target} is disabled")
        locator = self._live_page().locator(f'[data-oc-id="{element_id}"]')
        try:
            if action.tool == "click":
                locator.click()
                return f"Clicked {target}."
            if action.tool == "type":
                if record["role"] not in EDITABLE_ROLES:
                    raise _BadAction(f"{target} is not a text field; type works on textbox, searchbox and spinbutton")
                text = str(action.arguments["text"])
                locator.fill(text)
                return f"Typed {json.dumps(text, ensure_ascii=False)} into {target}."
            if "options" not in record:
                raise _BadAction(f"{target} is not a drop-down list; select works on a combobox")
            wanted = str(action.arguments["option"])
            if wanted not in record["options"]:
                raise _BadAction(f"{target} has no option {wanted!r}; its options are {record['options']}")
            locator.select_option(label=wanted)
            return f"Selected {json.dumps(wanted, ensure_ascii=False)} in {target}."
        except self._browser_error as error:
            if self._page.is_closed() or not self._browser.is_connected():
                raise EnvError(f"the browser went away during {action.tool}: {error}") from error
            raise _BadAction(f"could not {action.tool} {target}: {str(error).splitlines()[0]}") from error

    def _evaluate(self) -> Outcome:
        if self._task is None:
            raise RuntimeError("no episode yet: call reset(task) first")
        state = self._live_page().evaluate(_APP_STATE_JS)
        if state is None:
            return Outcome(False, 0.0, "the page has no appState: the app is gone (did it navigate away?)")
        expect = self._task.data["expect"]
        failures = [line for path, value in expect.items() for line in _differences(path, _lookup(state, path), value)]
        if failures:
            return Outcome(False, 0.0, "; ".join(failures))
        return Outcome(True, 1.0, f"the page holds all expected values: {', '.join(expect)}")

    def _shutdown(self) -> None:
        for closing in (self._context, self._browser):
            if closing is not None:
                try:
                    closing.close()
                except Exception as error:  # already gone: nothing left to close
                    log.debug("GUI env: closing %s: %s", closing, error)
        if self._playwright is not None:
            self._playwright.stop()
        if self._server is not None:
            self._server.close()
        self._context = self._browser = self._playwright = self._server = self._page = None


class _BadAction(Exception):
    """The agent's action cannot be done: reported in the observation, never raised to the caller."""


def _element_id(value: Any) -> int:
    # Models write 5, "5" or "[5]"; all mean the same element.
    text = str(value).strip().strip("[]").strip()
    if isinstance(value, bool) or not text.isdigit():
        raise _BadAction(f"element must be an id, the number in brackets (like 5); got {value!r}")
    return int(text)
