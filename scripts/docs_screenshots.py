"""Screenshots of the MLflow UI for the docs (`make docs-screenshots`): a run's metrics, a trace with its
assessments, and two runs compared, taken in headless Chromium against runs this script makes.

It runs two small offline EHR-ChatQA runs (the reference agent, the scripted user; the IncreQA and AdaptQA flows)
into a fresh MLflow store in a temporary folder, starts `mlflow ui` on a free loopback port over that store, and has
Debian's Chromium (`apt-get install chromium`) render each page to `docs/images/*.png`. It stops only what it
started (the UI server by its process id). Look at each picture before committing it.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_runs(store: Path, tmp: Path) -> None:
    """Two small runs of the main job, one per EHR-ChatQA flow, into `store`."""
    for flow in ("incre", "adapt"):
        cmd = [sys.executable, "-m", "ehrbench", "benchmark=ehrchatqa_mimic", f"benchmark.flows=[{flow}]",
               "limit_tasks=3", "trials=3", "data.dictionary=used", f"tracking.root={store}",
               f"run_name=ehrchatqa-{flow}", f"hydra.run.dir={tmp / flow}"]
        print("running:", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def wait_for(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the MLflow UI did not answer at {url} within {timeout_s:g} s")


class Browser:
    """Headless Chromium driven over the DevTools protocol: open a page, wait for what it shows, click, capture."""

    def __init__(self, chromium: str, profile: Path, size: str):
        port = free_port()
        width, height = (int(v) for v in size.split(","))
        self.proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--remote-debugging-port={port}",
                                      f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(f"http://127.0.0.1:{port}/json/version", 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        from websockets.sync.client import connect

        self.stack = contextlib.ExitStack()                                 # the connection, closed in close()
        self.ws = self.stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self.calls = 0
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params):
        self.calls += 1
        self.ws.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=120))
            if message.get("id") == self.calls:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def js(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str, text: str, timeout_s: float = 60) -> None:
        """Go to `url` and wait until the page shows `text` and nothing is still loading."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.js(f"document.body && document.body.innerText.includes({json.dumps(text)})") and \
                    not self.js("!!document.querySelector('[role=progressbar], [aria-busy=true]')"):
                time.sleep(2)               # charts draw after their data arrives
                return
            time.sleep(0.5)
        raise RuntimeError(f"{url} did not show {text!r} within {timeout_s:g} s")

    def click_text(self, text: str) -> bool:
        """Click the innermost element whose own text is `text` (a tab, a row); False when there is none."""
        return bool(self.js(f"""(() => {{
            const all = [...document.querySelectorAll('button, a, [role=tab], [role=row], span, div')]
                .filter(e => e.innerText && e.innerText.trim() === {json.dumps(text)});
            if (!all.length) return false;
            all[all.length - 1].click(); return true; }})()"""))

    def click_label(self, label: str) -> bool:
        """Click the first button whose aria-label starts with `label`; False when there is none."""
        return bool(self.js(f"""(() => {{
            const b = document.querySelector('button[aria-label^={json.dumps(label)}]');
            if (!b) return false; b.click(); return true; }})()"""))

    def close_assistant(self) -> None:
        """MLflow 3.17's UI opens its Assistant panel on a first visit: close it (the browser remembers)."""
        self.click_label("Close")
        time.sleep(1)

    def shot(self, out: Path) -> None:
        out.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size // 1024} KB)")

    def close(self) -> None:
        self.stack.close()
        os.killpg(self.proc.pid, signal.SIGTERM)          # the browser this script started, nothing else
        self.proc.wait(timeout=30)


def urls(uri: str, base: str) -> tuple[str, str, str]:
    """The first run's page, one of its traces, and the two runs compared."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("ehrchatqa").experiment_id
    runs = mlflow.search_runs([experiment], output_format="list", order_by=["attributes.start_time ASC"])
    first = runs[0].info.run_id
    trace = mlflow.search_traces(locations=[experiment], run_id=first, max_results=1,
                                 return_type="list")[0].info.trace_id
    ids = json.dumps([r.info.run_id for r in runs]).replace(" ", "")
    return (f"{base}/#/experiments/{experiment}/runs/{first}",
            f"{base}/#/experiments/{experiment}/traces?selectedEvaluationId={trace}",
            f"{base}/#/compare-runs?runs={ids}&experiments=[\"{experiment}\"]")


def take(browser: Browser, run: str, trace: str, compare: str) -> None:
    """The three pictures, each page arranged as a reader would look at it."""
    browser.open(run, "SR-3")
    browser.close_assistant()
    browser.open(run, "SR-3")                       # the overview laid out without the panel: metrics on the left
    browser.shot(IMAGES / "mlflow-run-metrics.png")
    browser.open(trace, "reward")
    browser.click_text("Got it")                    # a first-visit hint over the trace list
    browser.click_label("Assess trace")             # the assessments pane: the reward (and judges' verdicts)
    time.sleep(2)
    browser.shot(IMAGES / "mlflow-trace-assessments.png")
    browser.open(compare, "SR-3")
    browser.click_text("Visualizations")            # folded, so the run details and metrics fill the picture
    browser.click_text("Parameters")
    time.sleep(2)
    browser.shot(IMAGES / "mlflow-compare-runs.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1440,900", help="browser window, width,height")
    parser.add_argument("--store", type=Path, help="an MLflow store made by an earlier call (its runs are reused)")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("docs-screenshots: no chromium on PATH; install Debian's package (apt-get install chromium), "
                 "then run make docs-screenshots again")
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ehrbench-screenshots-") as folder:
        tmp = Path(folder)
        store = args.store or tmp / "mlruns"
        if not args.store:
            make_runs(store, tmp)
        uri = f"sqlite:///{store.resolve() / 'mlflow.db'}"
        port = free_port()
        server = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "ui", "--backend-store-uri", uri,
                                   "--host", "127.0.0.1", "--port", str(port)],
                                  cwd=store, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)      # its workers in its own group: stopped together
        browser = None
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(f"{base}/health")
            browser = Browser(chromium, tmp / "profile", args.size)
            take(browser, *urls(uri, base))
        finally:
            if browser is not None:
                browser.close()
            os.killpg(server.pid, signal.SIGTERM)          # the group this script started, nothing else
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
