"""What a server kind is: the one record each server's module exports, and the ready rules it gives a run.

A kind's module (sglang.py, vllm.py, transformers.py, tgi.py, trtllm.py, llamacpp.py, generic.py) ends with
`KIND = ServerKind(…)`; kinds.py registers it. A kind whose statements are one line each declares tables for
tableparser.py instead of writing a parser class (tgi, trtllm, llamacpp, lmdeploy). Everything the kit does differently per
server reads this record: detection and parsing of a log, the lifecycle's ready and fatal lines, params validation
of `server.kind`, `launchlab parse --server` and the report's memory budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for the annotations: importing pandas here would make `import launchlab.params` slow
    import pandas as pd

    from launchlab.logparse.common import LineParser

    Budget = Callable[[pd.DataFrame, pd.DataFrame, pd.DataFrame | None], pd.DataFrame]


@dataclass(frozen=True)
class ReadyRules:
    """When a run's server is ready (its ready line) and when it has failed (any of its fatal lines)."""

    ready_pattern: str | None
    fatal_patterns: tuple[str, ...]


@dataclass(frozen=True)
class BreakEven:
    """The value of one server argument at which a launch starts to have room for its KV cache, as the kind's
    budget predicts it from the logged numbers (a threshold search of that argument's flag is compared with it).

    arg      the argument as the server records it (`mem_fraction_static`); a search whose flag records under this
             name gets the prediction
    column   the budget frame's column that holds it, per run (`break_even_fraction`)
    formula  how it is computed from the log, for the reader (`1 − avail/total`)
    flag     the command-line flag that sets the argument (`--mem-fraction-static`)
    margin   how far past the break-even a level must sit to start for sure (a share of the memory): the drift of
             the logged numbers between launches
    """

    arg: str
    column: str
    formula: str
    flag: str = ""
    margin: float = 0.01


@dataclass(frozen=True)
class MemoryShare:
    """A flag that sets the share of the GPU's memory a kind's KV cache takes, where the log gives no figures to
    predict a break-even from (TurboMind prints its blocks, not the free memory they were sized from): diagnose
    drafts it as a factor by rule, the failing value against half of it, after a failure of `reasons`.

    arg, flag  the argument as the log's engine configuration records it, and the flag that sets it
    what       the share in words, for the factor's comment
    reasons    the failure reasons a smaller share can cure (out of memory as the cache is sized)
    """

    arg: str
    flag: str
    what: str
    reasons: tuple[str, ...] = ("cuda_oom", "kv_cache_no_memory")


@dataclass(frozen=True)
class Suspect:
    """A feature of a kind that a failing launch may owe its failure to: `launchlab diagnose` proposes it as an
    on/off factor where the log shows it switched on.

    name       the factor's name in the draft (custom_ar)
    arg        the argument (ParsedLog.args) whose value shows the state
    on         a regex the argument's whole value matches when the feature is on ("False" for a disable_ switch)
    absent_on  whether an argument dump that leaves the argument out means on (a dump of non-default arguments
               only, as vLLM's, where the feature is on by default); None: an absent argument says nothing
    off_flags, off_env   what the "off" level sets (a flag set to false is removed from the command)
    needs_tp   the feature only takes effect with tensor parallelism > 1 (custom all-reduce)
    what       the feature in words, for the diagnosis and the factor's comment
    phase      the first startup phase in which it takes memory (PHASES): a launch that failed in an earlier
               phase cannot owe its failure to it (SGLang's CUDA graphs are captured after the KV cache is sized,
               out of the share the fraction reserves)
    custom_ar  the feature is the kind's custom all-reduce: the log's per-rank states (on, failed, disabled and
               why) and a failure in its own code show it, beside its argument
    forced_on, forced_note   what the "on" level sets where the server switches the feature off by itself on the
               box (custom all-reduce on more than two PCIe-only GPUs), and which builds read it (said in the draft)
    """

    name: str
    arg: str
    on: str
    off_flags: dict[str, str | bool]
    what: str
    off_env: dict[str, str] = field(default_factory=dict)
    absent_on: bool | None = None
    needs_tp: bool = False
    phase: str = "startup"
    custom_ar: bool = False
    forced_on: dict[str, str] = field(default_factory=dict)
    forced_note: str = ""


@dataclass(frozen=True)
class Instrumentation:
    """A patch that makes a kind's log print the numbers it sizes its KV cache from (a file of the package's
    templates/params/patches), for the server versions it applies to; `prints` is the line it adds."""

    patch: str
    versions: tuple[str, ...]
    prints: str


@dataclass(frozen=True)
class Relaunch:
    """How `launchlab diagnose` rebuilds a launch command from a log's own argument dump.

    launcher      the words before the flags; `{model}` is the model's path (`vllm serve {model}`)
    args          the logged arguments that become flags (model and parallel sizes included); None: every logged
                  argument (a dump of non-default arguments only)
    skip          logged arguments never put back (the port, the host: the draft sets its own)
    simulated     the launcher of the kit's simulator of this kind (sim/), which takes the same flags; None: the
                  simulated host cannot run it
    sim_card_mib  (free GiB before the weights, reserved_mib=, custom_ar=) → the memory of a simulated card on
                  which the simulator's rank sees that much free: a box shaped like a log's GPUs
    compiles      its first start on a machine compiles kernels that later starts reuse (a warm-up run is due)
    port_flag     the flag its port is given with (`{port}` follows it)
    """

    launcher: tuple[str, ...]
    args: tuple[str, ...] | None = None
    skip: frozenset[str] = frozenset({"host", "port"})
    simulated: tuple[str, ...] | None = None
    sim_card_mib: Callable[..., int] | None = None
    compiles: bool = False
    port_flag: str = "--port"


@dataclass(frozen=True)
class LogFacts:
    """What a kind's log states about its software and the launch's shape (logfacts.py reads these).

    version   matches a line that states the server's version; its first group that matched is the version
    package   the server's Python package: `/lib/pythonX.Y/site-packages/<package>/` in a path names the install's
              Python
    model, tp_size, dp_size, pp_size   the arguments (ParsedLog.args) that name the model and the parallel sizes
    labels    facts only this kind's parser states (ParsedLog.facts: vLLM's engine generation), as a confound
              names them
    """

    version: re.Pattern[str] | None = None
    package: str | None = None
    model: str | None = None
    tp_size: str | None = None
    dp_size: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    pp_size: str | None = None


@dataclass(frozen=True)
class GraphCapture:
    """How a kind's log shows its CUDA graphs captured, and what that says of its custom all-reduce: an active one
    registers the graphs' addresses in a line of its own, so a capture on more than one GPU without that line means
    it was off (levelchecks.custom_ar_observed).

    fields      the per-rank fields its parser sets once the capture is done
    registered  the custom all-reduce's line, as the reader is told it
    """

    fields: tuple[str, ...]
    registered: str


@dataclass(frozen=True)
class KnownFlags:
    """The long flags one release of a kind's server takes, as the kit read them off that release's own argument dump
    (kindflags.py). Another release may add or drop some, so a flag outside the list is only ever a warning.

    version    the release the names were read from ("0.5.17"): warnings name it
    names      the flags with their dashes ("--mem-fraction-static")
    negatable  a boolean flag is also taken with `--no-` before its name (argparse's BooleanOptionalAction)
    """

    version: str
    names: frozenset[str]
    negatable: bool = False


@dataclass(frozen=True)
class Setting:
    """One way to set a state the kit reads from a kind's log: a flag or an environment variable, what it sets, and
    the server versions that read it (None: every version the kit knows of)."""

    name: str  # "--disable-custom-all-reduce", "SGLANG_SKIP_P2P_CHECK"
    sets: str  # what it does to the state, in words: "off", "trusts the driver's P2P report"
    since: str | None = None
    until: str | None = None
    note: str = ""  # where it comes from, when not the upstream server ("the seed's build and the simulator")

    def read_by(self, version: str | None) -> bool:
        """Whether a server of this version reads it (an unknown version: as far as the kit knows, yes)."""
        if version is None:
            return True
        v = _version_key(version)
        return (self.since is None or v >= _version_key(self.since)) and \
            (self.until is None or v[:len(_version_key(self.until))] <= _version_key(self.until))


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


@dataclass(frozen=True)
class State:
    """A state of the server the kit reads from its log (levelchecks: custom all-reduce), with the flags and
    environment variables that set it and how the log shows it: a level that sets it counts as taken only where the
    log shows it, or through a setting the server reads."""

    name: str  # "custom all-reduce"
    settings: tuple[Setting, ...]
    shown_by: str  # how the log shows it, for a reader told what would show a level taking effect


# the outcome's reason of a launch that started with a KV pool too small for one request at its own context length
# (ServerKind.usable): degraded, not ready
POOL_BELOW_CONTEXT = "kv_pool_below_context"

# environment variables the libraries under every server read (NCCL, CUDA, PyTorch, Hugging Face): a level that sets
# one is set for the server, whichever kind it is; a name outside these and the kind's own table is not known to be read
LIBRARY_ENV = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_", "NVIDIA_", "HF_", "TRANSFORMERS_", "OMP_", "TOKENIZERS_")


@dataclass(frozen=True)
class ServerKind:
    """Everything the kit knows about one kind of inference server.

    name            `server.kind` in params, `--server` of `launchlab parse`, `server` of a parsed log
    evidence        matches a line this server writes; detection picks the kind with the most matching lines
                    among a log's first lines. None: never detected (the fallback kind)
    ready_pattern   regex of the line that says the server is ready; params' `ready.log_pattern` replaces it.
                    None: the params must give a log pattern or a health URL
    fatal_patterns  regexes of lines after which the server will not become ready; params' own are added
    parser          ReadyRules → a fresh line parser for one log (only a kind without a log format of its own,
                    `generic`, reads the rules)
    budget          (events, runs, telemetry) → one row per run: the KV-cache budget recomputed from the
                    logged numbers (budget.py). None: the log carries no budget
    report_intro    Markdown before the report's budget table: how this server sizes its KV cache.
                    None: the report says the log has no budget
    break_even      the argument whose break-even the budget predicts, its column and formula (the verdict's
                    break-even sentence and a threshold search's prediction). None: the budget predicts none
    memory_share    where there is no break-even: the flag of the KV cache's share of memory (MemoryShare), which
                    diagnose drafts by rule. None: none
    custom_ar_off   the flag that switches this server's custom all-reduce off (a factor that sets it is about
                    custom all-reduce, and each level is checked against the state its log gives). None: none
    arg_aliases     a flag (without its dashes) → the argument the server records it under, where that is not the
                    flag's own name with `_` for `-` (SGLang's `tp` → `tp_size`): the level checks look it up there
    log_facts       what its log states about its version, install and launch shape (LogFacts)
    volatile_args   the arguments it records (ParsedLog.args) that differ between any two launches without changing
                    what is compared — ports, seeds, paths, names — or that the log facts compare already (the
                    model, the parallel sizes): never a confound (confounds.log_differences, derivedargs)
    memory_fields   the per-rank fields of its log the report's memory table shows, in the table's order
    free_memory     (that memory table, one row per variant) → what a rank had free after the last startup phase
                    that ran, for the budget chart's free bar. None: its log does not say
    graph_capture   how its log shows CUDA graphs captured (GraphCapture), for what that says of its custom
                    all-reduce. None: it does not say
    units_note      Markdown: the units of its memory table as its log prints them (SGLang's `GB` is GiB), said
                    under that table for this kind only
    model_flags     the flags its command names the model's weights with (the provenance records what that path
                    holds); a command of `… serve MODEL` names it as the word after `serve` whatever the kind
    relaunch        how `launchlab diagnose` rebuilds its command from a log (Relaunch). None: it cannot
    suspects        features a failing launch may owe its failure to (Suspect), as diagnose proposes them
    instrumentation its patch that prints the KV sizing's numbers (Instrumentation). None: it has none
    pool_cap_args   the arguments it records that cap its KV pool whatever memory is left (SGLang's
                    max_total_tokens): a capped pool's size says nothing of the memory its fraction left, so the
                    budget never infers memory from it
    states          the states the kit reads from its log that flags and environment variables set (State): an
                    environment variable is evidence of a level only where this table (or LIBRARY_ENV) says the
                    server reads it
    max_length      what sets the longest request its KV cache must hold (a flag, or words where no flag does): the
                    fix diagnose says for `max_len_exceeds_kv`. None: it does not say
    known_flags     the flags its server takes, read off one release's argument dump (KnownFlags): params are
                    checked against them (and the flags this record names), a near miss is a warning. None: the kit
                    keeps no list, and checks no flag
    usable          (parsed log as parsed.json holds it) → why a launch that started cannot serve one request at its
                    own context length (SGLang: a KV pool of fewer tokens than `context_len`), in words; None: it can,
                    or the log does not say. None: the kind refuses such a launch by itself (vLLM) or does not say
    """

    name: str
    evidence: re.Pattern[str] | None
    ready_pattern: str | None
    fatal_patterns: tuple[str, ...]
    parser: Callable[[ReadyRules], LineParser]
    budget: Budget | None = None
    report_intro: str | None = None
    break_even: BreakEven | None = None
    memory_share: MemoryShare | None = None
    custom_ar_off: str | None = None
    arg_aliases: dict[str, str] = field(default_factory=dict)
    log_facts: LogFacts = field(default_factory=LogFacts)
    volatile_args: frozenset[str] = frozenset()
    memory_fields: tuple[str, ...] = ()
    free_memory: Callable[[pd.DataFrame], pd.Series] | None = None
    graph_capture: GraphCapture | None = None
    model_flags: tuple[str, ...] = ()
    relaunch: Relaunch | None = None
    suspects: tuple[Suspect, ...] = ()
    instrumentation: Instrumentation | None = None
    units_note: str = "GiB"
    pool_cap_args: tuple[str, ...] = ()
    states: tuple[State, ...] = ()
    usable: Callable[[dict], str | None] | None = None
    max_length: str | None = None
    known_flags: KnownFlags | None = None

    def reads_env(self, name: str, version: str | None = None) -> Setting | None:
        """The setting an environment variable is to this kind's server (of this version), or None when the kit
        does not know the server to read it; the libraries' variables (LIBRARY_ENV) are read by every kind."""
        for state in self.states:
            for setting in state.settings:
                if setting.name == name and setting.read_by(version):
                    return setting
        return Setting(name, "read by the libraries under the server") if name.startswith(LIBRARY_ENV) else None

    def flag_names(self) -> frozenset[str]:
        """Every long flag the kit knows this kind's server to take: its list's (known_flags) and those this record
        names itself (the model's, the break-even's, custom all-reduce's, the states' and suspects' settings, the
        aliases, what diagnose puts back on a command), so that no flag the kit itself writes is ever doubted. Empty
        where the kind keeps no list."""
        if self.known_flags is None:
            return frozenset()
        named = {*self.model_flags, self.custom_ar_off, self.max_length, self.break_even and self.break_even.flag,
                 *(f"--{alias}" for alias in self.arg_aliases),
                 *(s.name for state in self.states for s in state.settings),
                 *(flag for suspect in self.suspects for flag in suspect.off_flags)}
        if self.relaunch is not None:
            named |= {self.relaunch.port_flag, *(f"--{arg.replace('_', '-')}" for arg in self.relaunch.args or ())}
        return self.known_flags.names | {f for f in named if isinstance(f, str) and f.startswith("--")}

    def state(self, name: str) -> State | None:
        return next((s for s in self.states if s.name == name), None)

    def rules(self, ready_pattern: str | None = None, fatal_patterns: Iterable[str] = ()) -> ReadyRules:
        """This kind's ready line and fatal patterns with the params' own added (a params ready pattern wins)."""
        return ReadyRules(ready_pattern or self.ready_pattern, self.fatal_patterns + tuple(fatal_patterns))
