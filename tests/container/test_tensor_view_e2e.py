"""The tensor view in a real rank: the hook starts it, debugpy listens, our DAP client plays VS Code.

What the Variables pane receives for a frame holding tensors (``container/rank/tensor_view.py``): the one
line, the children in their order with the expressions "Add to Watch" uses, the statistics on expand; and
``REMOTE_DEBUG_TENSOR_VIEW=0`` gives pydevd's own presentation back.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from remote_debug.contract import spec
from remote_debug.laptop.ide.dap_client import DapClient, attach_and_configure
from tests.helpers.hook_runs import PYTHON, HookRun, wait_for

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
    pytest.mark.timeout(180),
]

RANK = (
    "import pathlib, sys, time\n"
    "import torch\n"
    "torch.manual_seed(0)\n"
    "weights = torch.randn(64, 512)\n"
    "layer = torch.nn.Linear(512, 8)\n"
    "batch = {'x': weights, 'y': torch.zeros(64, dtype=torch.long)}\n"
    "loss = torch.tensor(0.25)\n"
    "storage = weights.untyped_storage()\n"
    "stop = pathlib.Path(sys.argv[1], 'stop')\n"
    "while not stop.exists():\n"
    "    beats = 1  # BREAK\n"
    "    time.sleep(0.02)\n"
)
BREAK_LINE = RANK.splitlines().index("    beats = 1  # BREAK") + 1

# a tensor's children in the order the Variables view lists them: the summary first (stock pydevd: `shape` 39th)
TENSOR_CHILDREN = [
    "shape",
    "dtype",
    "device",
    "strides",
    "contiguous",
    "numel",
    "bytes",
    "requires_grad",
    "is_leaf",
    "grad_fn",
    "grad",
    "statistics",
    "attributes",
]


def _stopped(run: HookRun, tensor_view: str, adapter: str = spec.DEBUGPY_ADAPTERS[0]) -> tuple[DapClient, int]:
    """The rank started with REMOTE_DEBUG_TENSOR_VIEW=``tensor_view``, stopped at BREAK_LINE; client and frame id."""
    script = run.root / "train.py"
    script.write_text(RANK)
    run.env[spec.ENV_LISTEN] = "eager"
    run.env[spec.ENV_TENSOR_VIEW] = tensor_view
    run.env[spec.ENV_DEBUGPY_ADAPTER] = adapter
    run.start(PYTHON, str(script), str(run.marks))
    port = wait_for(lambda: (d := run.rank_if_any(0)) is not None and d["port"], 60, "the listener")
    client = attach_and_configure("127.0.0.1", int(port), breakpoints={str(script): [BREAK_LINE]}, timeout=60)
    thread_id = int(client.wait_stopped(60)["threadId"])
    frame = client.stack_trace(thread_id, levels=1, timeout=30)[0]
    return client, int(frame["id"])


def _variables(client: DapClient, reference: int) -> dict[str, dict[str, Any]]:
    body = client.request("variables", {"variablesReference": reference}, 30)
    return {str(v["name"]): v for v in body.get("variables", [])}


def _locals(client: DapClient, frame_id: int) -> dict[str, dict[str, Any]]:
    scopes = client.scopes(frame_id, timeout=30)
    return _variables(client, int(next(s for s in scopes if s["name"] == "Locals")["variablesReference"]))


def _end(run: HookRun, client: DapClient) -> None:
    try:
        client.disconnect()
    finally:
        client.close()
    (run.marks / "stop").write_text("")
    assert run.wait(60) == 0, run.stderr


@pytest.mark.parametrize("adapter", spec.DEBUGPY_ADAPTERS)  # pydevd serving DAP itself, or debugpy's adapter
def test_the_variables_pane_gets_one_line_and_the_summary_first(run: HookRun, adapter: str) -> None:
    client, frame_id = _stopped(run, "1", adapter)
    try:
        local = _locals(client, frame_id)
        weights = local["weights"]
        assert weights["value"] == "Tensor[64, 512] float32 cpu"
        assert weights["type"] == "Tensor" and weights["variablesReference"] > 0
        assert local["loss"]["value"] == "Tensor[] float32 cpu = 0.25"  # a tiny CPU tensor shows its value
        assert local["batch"]["value"] == ("dict[2]: {'x': Tensor[64, 512] float32 cpu, 'y': Tensor[64] int64 cpu}")
        assert local["storage"]["value"] == "UntypedStorage[128.0 KiB] cpu"  # never its 131,072 bytes

        children = _variables(client, weights["variablesReference"])
        assert list(children) == TENSOR_CHILDREN
        assert [children[n]["value"] for n in ("shape", "dtype", "device", "strides", "numel")] == [
            "[64, 512]",
            "float32",
            "cpu",
            "[512, 1]",
            "32768",
        ]
        assert children["bytes"]["value"] == "128.0 KiB (131,072 B)"
        assert children["contiguous"]["value"] == "True" and children["grad"]["value"] == "None"
        assert children["shape"]["evaluateName"] == "weights.shape"  # "Add to Watch" evaluates the real thing
        assert children["shape"]["variablesReference"] == 0  # a leaf, not an expandable str

        stats = _variables(client, children["statistics"]["variablesReference"])
        assert list(stats)[:5] == ["min", "max", "mean", "NaNs", "infs"]
        assert float(stats["min"]["value"]) < 0 < float(stats["max"]["value"])
        assert abs(float(stats["mean"]["value"])) < 0.05 and stats["NaNs"]["value"] == "0"
        assert stats["over"]["value"] == "all 32,768 elements"
        first = stats["[0, :10]"]["value"]
        assert first.startswith("[") and first.count(",") == 9

        # a parameter, as hover / the watch pane evaluate it
        body = client.request("evaluate", {"expression": "layer.weight", "frameId": frame_id, "context": "hover"}, 30)
        assert body["result"] == "Parameter[8, 512] float32 cpu requires_grad"
    finally:
        _end(run, client)
    assert "tensor view" not in run.stderr  # installed quietly: it logs only when it could not install


def test_tensor_view_off_gives_pydevds_own_presentation(run: HookRun) -> None:
    client, frame_id = _stopped(run, "0")
    try:
        local = _locals(client, frame_id)
        assert local["weights"]["value"].startswith("tensor([[")  # the repr: values, no shape
        children = _variables(client, local["weights"]["variablesReference"])
        # every attribute dir() lists, grouped and sorted: "shape" is the 39th with torch 2.x
        assert "statistics" not in children and list(children).index("shape") > 20
    finally:
        _end(run, client)
