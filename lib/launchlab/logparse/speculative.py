"""Speculative decoding in a log: the method and draft model it states, which model class and which code is a draft
model's, and the names of the draft's own figures.

A draft model (EAGLE / EAGLE3 / MTP / NextN / a small draft model) loads its weights, sizes its KV cache and
captures its CUDA graphs after the target's (SGLang ≤ 0.5.x of 2025), or loads its weights before the target's KV
cache is sized (SGLang's "draft weights are now counted"). Its lines count for the main phase they belong to (a
draft's weights for `weights`), but its figures are kept apart per rank as `draft_<field>` (`draft_weights_mem_gib`,
`draft_graph_s`, `draft_extend_graph_s`): the budgets and verdicts read the target's fields, and a draft's 1.5 GiB
of weights written into them would be read as the target's.
"""

from __future__ import annotations

import re

from launchlab.logparse.parsedlog import Speculative

# a model class that is a draft's: `LlamaForCausalLMEagle3`, `DeepseekV4ForCausalLMNextN`, `Qwen3NextMTP`
DRAFT_ARCHITECTURE = re.compile(r"Eagle|EAGLE|NextN|MTP|Mtp|Medusa|Draft")
# a traceback's frame path or code line in a draft model's code: SGLang's speculative/ (eagle_worker.py,
# eagle_draft_cuda_graph_runner.py), vLLM's drafter (v1/spec_decode/eagle.py, llm_base_proposer.py, `self.drafter`)
DRAFT_CODE = re.compile(r"draft|[Ee]agle|EAGLE|/speculative/|proposer|\bmtp|_mtp|NextN|[Mm]edusa")
# constructing a draft worker loads the draft model first (SGLang's `self.draft_worker = EAGLEWorker(`)
DRAFT_WORKER = re.compile(r"\b\w*(?:EAGLE|Eagle|Draft|Standalone|MTP|NextN)\w*Worker\w*\(")
# `architectures=['DeepseekV4ForCausalLMNextN']`: the config the draft runner builds states its class
ARCHITECTURES = re.compile(r"architectures=\[['\"](\w+)['\"]")
_METHOD = re.compile(r"""(?<![\w-])method['"]?\s*[:=]\s*['"]?([\w.-]+)""")
# `'model': 'x'` (V1's mapping), `model='x'` (SpeculativeConfig(…)), V0's `SpeculativeConfig(draft_model='x', …)`
_MODEL = re.compile(r"""(?<![\w-])(?:draft_)?model['"]?\s*[:=]\s*['"]([^'"]+)""")
# a command line's own flags, where a log or a paste shows the command: `--speculative-config '{"method": …}'`
_CONFIG_FLAG = re.compile(r"--speculative[-_]config[= ]'?(\{[^}]*\})")
_SGLANG_FLAGS = re.compile(r"--speculative-algorithm[= ](\w+)|--speculative-draft-model-path[= ](\S+)")


def from_args(spec: Speculative, args: dict[str, str]) -> None:
    """What the server's own account of its arguments says: SGLang's `speculative_algorithm` and
    `speculative_draft_model_path`, vLLM's `speculative_config` (a mapping or `SpeculativeConfig(…)`), V0's
    `speculative_model` and the early `draft_model`."""
    algorithm = args.get("speculative_algorithm")
    if algorithm and algorithm != "None":
        spec.method = algorithm
    for name in ("speculative_draft_model_path", "speculative_model", "draft_model"):
        if (value := args.get(name)) and value != "None":
            spec.draft_model = value
    if (config := args.get("speculative_config")) and config != "None":
        _from_config(spec, config)


def from_text(spec: Speculative, text: str) -> None:
    """What a line says in words or in a command it shows: vLLM's "Detected MTP model", SGLang's "draft weights are
    now counted", `--speculative-config '{…}'` and SGLang's `--speculative-algorithm` flags."""
    if "Detected MTP model" in text:
        spec.method = spec.method or "mtp"
    if "draft weights are now counted" in text:
        spec.draft_weights_counted = True
    if "--speculative" in text:
        if (config := _CONFIG_FLAG.search(text)) is not None:
            _from_config(spec, config.group(1))
        for algorithm, path in _SGLANG_FLAGS.findall(text):
            spec.method = algorithm or spec.method
            spec.draft_model = path or spec.draft_model


def _from_config(spec: Speculative, text: str) -> None:
    if (method := _METHOD.search(text)) is not None:
        spec.method = method.group(1)
    if (model := _MODEL.search(text)) is not None and model.group(1) != "None":
        spec.draft_model = model.group(1)


class DraftSteps:
    """Whose a startup statement is, the target's or the draft's, where a server prints the same statements for both
    models (SGLang's ModelRunner: "Init torch distributed ends", "Load weight begin/end", "KV Cache is allocated",
    "Memory pool end"), told apart per process (its rank tags) by the order they come in.

    Steps: `dist_init`, `weights_begin`, `weights_end`, `kv`, `pool_end`. The draft has begun once a line says so
    (`begin`: a draft model class, a draft capture) or a process starts a second model (a second distributed init or
    weight load). From then, on a process, a step its target has done already is the draft's (the draft loads after
    the target: its weights after the target's, its KV cache after the target's — also where the draft's weights come
    before the target's KV cache, SGLang's "draft weights are now counted"), and so is every step of a process that
    has shown none of its target's (an excerpt that starts inside the draft's startup); "Memory pool end" is the pool's
    whose KV cache the process allocated last."""

    def __init__(self) -> None:
        self.begun = False
        self._target: dict[str, set[str]] = {}  # process → the target's steps seen
        self._pool: dict[str, bool] = {}  # process → whether the KV cache it allocated last is the draft's

    def begin(self) -> None:
        self.begun = True

    def is_draft(self, process: str, step: str) -> bool:
        done = self._target.get(process, set())
        if step == "pool_end" and process in self._pool:
            draft = self._pool[process]
        elif not self.begun:
            draft = step in ("dist_init", "weights_begin") and step in done  # a second model on this process
            self.begun = draft
        else:
            draft = not done or step in done
        if not draft:
            self._target.setdefault(process, set()).add(step)
        if step == "kv":
            self._pool[process] = draft
        return draft

    def before_target_kv(self, process: str) -> bool:
        """The process loaded its target's weights and has not allocated its target's KV cache: a draft loaded now
        comes before the KV sizing, which then counts the draft's weights too."""
        done = self._target.get(process, set())
        return "weights_end" in done and "kv" not in done
