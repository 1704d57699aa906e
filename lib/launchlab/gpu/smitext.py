"""nvidia-smi's human-readable outputs: the default table (a fallback when CSV queries are unavailable) and
`nvidia-smi topo -m` (which GPU pairs talk over NVLink and which over PCIe).

Both formats change between drivers (the table's columns moved in R535, legacy drivers print MB, long names
and memory values are cut with `...`), so the parsers key on the shapes that stayed stable and keep a cut
value as missing rather than guessing it.
"""

from __future__ import annotations

import math
import re

from launchlab.escaping import without_escapes

_GPU_ROW = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off)?\s*\|\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                      r"[0-9A-Fa-f]{2}\.\d)")
_MEM_ROW = re.compile(r"\|\s*(?P<used>\d+)(?P<unit>MiB|MB)\s*/\s*(?P<total>\d+)(?:MiB|MB)\s*\|\s*(?P<util>\d+%|N/A)")
_PROCESS_ROW = re.compile(r"^\|\s+(?P<gpu>\d+)\s+(?:(?P<gi>\S+)\s+(?P<ci>\S+)\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|M\+C|C|G|M)"
                          r"\s+(?P<name>.*?)\s+(?P<mem>\d+MiB|\d+\.\.\.|N/A)\s*\|")
_DRIVER = re.compile(r"(?:Driver|KMD) Version:\s*([\d.]+)")
_CUDA = re.compile(r"CUDA(?: UMD)? Version:\s*([\d.]+)")


def parse_table(text: str) -> dict:
    """The default `nvidia-smi` table → {"driver", "cuda", "gpus": [...], "processes": [...]}.

    gpus: index, name, bus_id, mem_used_mib, mem_total_mib, util_gpu_pct; processes: gpu_index, pid, type,
    process_name, used_mib (NaN when the table cut the value, e.g. `12418...`).
    """
    out: dict = {"driver": None, "cuda": None, "gpus": [], "processes": []}
    pending: dict | None = None
    for line in text.splitlines():
        if out["driver"] is None and (v := _DRIVER.search(line)) is not None:
            out["driver"] = v.group(1)
            out["cuda"] = c.group(1) if (c := _CUDA.search(line)) else None
        if (g := _GPU_ROW.match(line)) is not None:
            pending = {"index": int(g["index"]), "name": g["name"].strip(), "bus_id": g["bus"]}
            continue
        if pending is not None and (m := _MEM_ROW.search(line)) is not None:
            scale = 1.0 if m["unit"] == "MiB" else 1e6 / 2**20  # legacy drivers print MB
            util = math.nan if m["util"] == "N/A" else float(m["util"].rstrip("%"))
            out["gpus"].append({**pending, "mem_used_mib": round(int(m["used"]) * scale, 1),
                                "mem_total_mib": round(int(m["total"]) * scale, 1), "util_gpu_pct": util})
            pending = None
            continue
        if (p := _PROCESS_ROW.match(line)) is not None:
            mem = p["mem"]
            out["processes"].append({"gpu_index": int(p["gpu"]), "pid": int(p["pid"]), "type": p["type"],
                                     "process_name": p["name"].strip(),
                                     "used_mib": float(mem[:-3]) if mem.endswith("MiB") else math.nan})
    return out


def parse_topo(text: str) -> list[dict]:
    """`nvidia-smi topo -m` → one record per ordered GPU pair: gpu_a, gpu_b, link (NV18, PIX, SYS, …), nvlink."""
    rows = [without_escapes(line).rstrip("\n") for line in text.splitlines()]
    header = next((r for r in rows if re.search(r"\tGPU0\b", r) or r.strip().startswith("GPU0\t")), None)
    if header is None:
        return []
    columns = [c.strip() for c in header.split("\t")]
    links = []
    for row in rows:
        cells = row.split("\t")
        name = cells[0].strip()
        if not re.fullmatch(r"GPU\d+", name) or row is header:
            continue
        for column, cell in zip(columns[1:], cells[1:], strict=False):
            if re.fullmatch(r"GPU\d+", column) and column != name:
                link = cell.strip()
                links.append({"gpu_a": int(name[3:]), "gpu_b": int(column[3:]), "link": link,
                              "nvlink": link.startswith("NV")})
    return links
