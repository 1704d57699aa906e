"""The simulated host's `nvidia-smi`: the real command's formats over the simulated GPU state.

Supported: `--query-gpu=…` and `--query-compute-apps=…` with `--format=csv[,noheader][,nounits]`,
`-l SEC` / `-lms MS` loops, `-i` GPU selection, `-L`, the default table and `topo -m` (a PCIe-only box).
Output follows driver 580 exactly: ", " separated cells, canonical field names in the header with ` [unit]`
suffixes that stay even with `nounits`, the timestamp as `YYYY/MM/DD HH:MM:SS.mmm`, one row per GPU per
sample, an invalid field rejected with the real message on stdout and exit code 2.
"""

from __future__ import annotations

import sys
import time

from launchlab.sim import state

# requested name -> (canonical header name, unit or "")
GPU_FIELDS = {
    "timestamp": ("timestamp", ""),
    "index": ("index", ""),
    "name": ("name", ""),
    "gpu_name": ("name", ""),
    "uuid": ("uuid", ""),
    "gpu_uuid": ("uuid", ""),
    "pci.bus_id": ("pci.bus_id", ""),
    "gpu_bus_id": ("pci.bus_id", ""),
    "driver_version": ("driver_version", ""),
    "count": ("count", ""),
    "memory.total": ("memory.total", "MiB"),
    "memory.reserved": ("memory.reserved", "MiB"),
    "memory.used": ("memory.used", "MiB"),
    "memory.free": ("memory.free", "MiB"),
    "utilization.gpu": ("utilization.gpu", "%"),
    "utilization.memory": ("utilization.memory", "%"),
    "temperature.gpu": ("temperature.gpu", ""),
    "power.draw": ("power.draw", "W"),
    "pstate": ("pstate", ""),
    "compute_mode": ("compute_mode", ""),
}
APP_FIELDS = {
    "timestamp": ("timestamp", ""),
    "gpu_name": ("gpu_name", ""),
    "gpu_uuid": ("gpu_uuid", ""),
    "gpu_bus_id": ("gpu_bus_id", ""),
    "pid": ("pid", ""),
    "process_name": ("process_name", ""),
    "name": ("process_name", ""),
    "used_memory": ("used_gpu_memory", "MiB"),
    "used_gpu_memory": ("used_gpu_memory", "MiB"),
}


def _now() -> str:
    """The sample's local time to the millisecond (time, not datetime: this module starts as a process of its own
    several times per run, and each import counts)."""
    now = time.time()
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def _gpu_values(host: dict, gpu: dict, allocs: list[dict]) -> dict[str, object]:
    mine = [a for a in allocs if a["gpu"] == gpu["index"]]
    used = sum(a["mib"] for a in mine)
    util = max((a.get("util_pct", 0) for a in mine), default=0)
    return {
        "timestamp": _now(),
        "index": gpu["index"],
        "name": gpu["name"],
        "uuid": gpu["uuid"],
        "pci.bus_id": gpu["bus_id"],
        "driver_version": state.SIM_DRIVER,
        "count": len(host["gpus"]),
        "memory.total": gpu["mem_total_mib"],
        "memory.reserved": gpu["mem_reserved_mib"],
        "memory.used": used,
        "memory.free": gpu["mem_total_mib"] - gpu["mem_reserved_mib"] - used,
        "utilization.gpu": util,
        "utilization.memory": util // 2,
        "temperature.gpu": 31 + util // 5,
        "power.draw": f"{70 + util * 5.2:.2f}",
        "pstate": "P0",
        "compute_mode": "Default",
    }


def _app_rows(host: dict, allocs: list[dict], selected: set[int]) -> list[dict[str, object]]:
    rows = []
    for a in allocs:
        if a["gpu"] not in selected or a["mib"] <= 0:
            continue
        gpu = host["gpus"][a["gpu"]]
        rows.append({"timestamp": _now(), "gpu_name": gpu["name"], "gpu_uuid": gpu["uuid"],
                     "gpu_bus_id": gpu["bus_id"], "pid": a["pid"], "process_name": a["name"],
                     "used_gpu_memory": a["mib"]})
    return rows


def _cell(value: object, unit: str, units: bool) -> str:
    return f"{value} {unit}" if units and unit else str(value)


def _parse_args(argv: list[str]) -> dict:
    opts = {"query": None, "kind": None, "format": "", "loop_s": None, "ids": None, "list": False}
    it = iter(range(len(argv)))
    for i in it:
        arg = argv[i]
        key, _, val = arg.partition("=")
        if key in ("--query-gpu", "--query-compute-apps"):
            opts["kind"] = "gpu" if key == "--query-gpu" else "apps"
            opts["query"] = val
        elif key == "--format":
            opts["format"] = val
        elif arg in ("-lms", "-l") or key in ("--loop-ms", "--loop"):
            raw = val if val else (argv[i + 1] if i + 1 < len(argv) else "")
            if not val:
                next(it, None)
            ms = arg == "-lms" or key == "--loop-ms"
            try:
                number = float(raw)
            except ValueError:
                number = 5.0 if not ms else 0.0
            if number <= 0:
                print("Provided [-l(ms) | --loop(-ms)=] value is incorrect. Loop frequency must be greater than 0.")
                raise SystemExit(2)
            opts["loop_s"] = number / 1000 if ms else number
        elif arg == "-i" or key == "--id":
            opts["ids"] = val if val else argv[i + 1]
            if not val:
                next(it, None)
        elif arg in ("-L", "--list-gpus"):
            opts["list"] = True
        else:
            print(f"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help. ({arg})")
            raise SystemExit(2)
    return opts


def _table(host: dict, allocs: list[dict]) -> str:
    """The default `nvidia-smi` table in the R580 layout (names are cut to fit, as the real one does)."""
    bar = "+-----------------------------------------+------------------------+----------------------+"
    lines = [time.strftime("%a %b %d %H:%M:%S %Y       "),
             "+-----------------------------------------------------------------------------------------+",
             f"| NVIDIA-SMI {state.SIM_DRIVER}             Driver Version: {state.SIM_DRIVER}     "
             f"CUDA Version: {state.SIM_CUDA}     |",
             bar,
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|=========================================+========================+======================|"]
    for g in host["gpus"]:
        v = _gpu_values(host, g, allocs)
        name = g["name"] if len(g["name"]) <= 29 else g["name"][:26] + "..."
        lines += [f"|{g['index']:>4}  {name:<29}  On  |   {g['bus_id']} Off |                    0 |",
                  f"| N/A   {v['temperature.gpu']}C    P0  {float(v['power.draw']):>13.0f}W /  600W | "
                  f"{v['memory.used']:>8}MiB / {g['mem_total_mib']}MiB | {v['utilization.gpu']:>6}%      Default |",
                  "|                                         |                        |             Disabled |", bar]
    lines += ["", "+-----------------------------------------------------------------------------------------+",
              "| Processes:                                                                              |",
              "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|=========================================================================================|"]
    rows = [a for a in allocs if a["mib"] > 0]
    if not rows:
        lines.append("|  No running processes found                                                             |")
    for a in rows:
        lines.append(f"|  {a['gpu']:>3}   N/A  N/A  {a['pid']:>14}      C   {a['name'][:34]:<34}  {a['mib']:>8}MiB |")
    lines.append("+-----------------------------------------------------------------------------------------+")
    return "\n".join(lines) + "\n"


def _topo(host: dict) -> str:
    """`nvidia-smi topo -m` of a PCIe-only box (no NVLink): NODE within a CPU socket's half, SYS across."""
    n = len(host["gpus"])
    half = max(1, n // 2)
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [head]
    for i in range(n):
        cells = [" X " if i == j else ("NODE" if i // half == j // half else "SYS") for j in range(n)]
        cpus = "0-31" if i < half else "32-63"
        rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{cpus}\t{i // half}\t\tN/A")
    rows += ["", "Legend:", "", "  X    = Self",
             "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
             "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
             "  NV#  = Connection traversing a bonded set of # NVLinks"]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = state.state_dir()
    host = state.read_host(root)
    if not argv:
        sys.stdout.write(_table(host, state.allocations(root)))
        return 0
    if argv[0] == "topo":
        if argv[1:] != ["-m"]:
            print("launchlab simulated nvidia-smi: only `topo -m` is simulated")
            return 2
        sys.stdout.write(_topo(host))
        return 0
    opts = _parse_args(argv)
    selected = set(range(len(host["gpus"])))
    if opts["ids"] is not None:
        try:
            selected = {int(x) for x in opts["ids"].split(",")}
        except ValueError:
            selected = set()
        if not selected <= set(range(len(host["gpus"]))) or not selected:
            print("No devices were found")
            return 6
    if opts["list"]:
        for g in host["gpus"]:
            if g["index"] in selected:
                print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        return 0
    if opts["kind"] is None:
        print("launchlab simulated nvidia-smi: only --query-gpu, --query-compute-apps, -L, topo -m and the table "
              "are simulated")
        return 2
    table = GPU_FIELDS if opts["kind"] == "gpu" else APP_FIELDS
    fields = [f.strip() for f in opts["query"].split(",") if f.strip()]
    for f in fields:
        if f not in table:
            print(f'Field "{f}" is not a valid field to query.\n')
            return 2
    fmt = {p.strip() for p in opts["format"].split(",")}
    header, units = "noheader" not in fmt, "nounits" not in fmt
    while True:
        sys.stdout.write(query_text(host, state.allocations(root), opts["kind"], fields, selected, header=header,
                                    units=units))
        sys.stdout.flush()
        if opts["loop_s"] is None:
            return 0
        header = False
        time.sleep(opts["loop_s"])


def query_text(host: dict, allocs: list[dict], kind: str, fields: list[str], selected: set[int], *, header: bool,
               units: bool) -> str:
    """What one sample of `--query-gpu` (kind "gpu": a row per selected GPU) or `--query-compute-apps` ("apps": a
    row per process holding memory there) prints, its header line first when asked. Pure: the stand-in prints it,
    and the tests' in-memory host (tests/memhost.py) answers the kit's GPU commands with it."""
    table = GPU_FIELDS if kind == "gpu" else APP_FIELDS
    rows = [_gpu_values(host, g, allocs) for g in host["gpus"] if g["index"] in selected] if kind == "gpu" \
        else _app_rows(host, allocs, selected)
    lines = [", ".join(table[f][0] + (f" [{table[f][1]}]" if table[f][1] else "") for f in fields)] if header else []
    lines += [", ".join(_cell(row[table[f][0]], table[f][1], units) for f in fields) for row in rows]
    return "".join(line + "\n" for line in lines)


def cli() -> None:
    """The command: main's exit status; a loop stopped by the kit (or a closed pipe) ends quietly."""
    try:
        sys.exit(main())
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(0)


if __name__ == "__main__":
    cli()
