"""The parameter mapping of a port: PyTorch ``state_dict`` names onto the leaves of a JAX pytree, as a
table.

Each PyTorch tensor is matched to a JAX leaf by name and by layout (``matching``), after the user's
``overrides`` decided theirs (``overrides``); what is left is matched onto stacked leaves, one layer of a
leaf ``(L, ...)`` per tensor (``stacked``: a scanned port). ``build`` makes the table of every entry, and
every row says what was mapped to what, with which transform, and how it was decided.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from crosscheck._report.report import Report, Section
from crosscheck._types import Console
from crosscheck._workloads.port.mapping import fused
from crosscheck._workloads.port.mapping.assemble import tiling, where
from crosscheck._workloads.port.mapping.matching import (
    CONVERT,
    UNUSED_BUFFER,
    Entry,
    Tensor,
    canonical,
    index_leaves,
    match,
)
from crosscheck._workloads.port.mapping.overrides import decide
from crosscheck._workloads.port.mapping.stacked import hint as stacked_hint
from crosscheck._workloads.port.mapping.stacked import is_stacked, stack, suggestion


@dataclasses.dataclass(frozen=True)
class Table:
    """The mapping: one entry per PyTorch tensor, then one per JAX leaf left unmatched."""

    entries: tuple[Entry, ...]

    def mapped(self) -> list[Entry]:
        return [e for e in self.entries if e.status == "mapped"]

    def problems(self) -> list[str]:
        """One line per entry that stops the port (an unmatched parameter or leaf, an ambiguity), then
        one per JAX leaf whose pieces do not cover it exactly once, and per PyTorch tensor mapped only
        in part (``assemble.tiling``)."""
        lines = [line for line in map(_problem, self.entries) if line is not None]
        return lines + self.pieces_problems()

    def pieces_problems(self) -> list[str]:
        """The leaves made of pieces that do not cover them exactly once, and the PyTorch tensors of
        which only some parts are mapped (a fused tensor with a slice left over)."""
        leaves: dict[tuple[str, ...], tuple[Tensor, list]] = {}
        takes: dict[str, tuple[Tensor, list]] = {}
        for e in self.mapped():
            assert e.torch is not None and e.jax is not None
            if e.transform == CONVERT:  # the user's conversion makes the leaf: no pieces to tile
                continue
            leaves.setdefault(e.jax.path, (e.jax, []))[1].append(e.box)
            if e.take is not None:
                takes.setdefault(e.torch.name, (e.torch, []))[1].append(((e.take),))
        out = []
        for leaf, boxes in leaves.values():
            wrong = tiling(leaf, boxes)
            if wrong is not None:
                out.append(f"JAX leaf `{'/'.join(leaf.path)}` {leaf.shape} is not made whole: {wrong}")
        for tensor, boxes in takes.values():
            wrong = tiling(tensor, list(dict.fromkeys(boxes)))
            if wrong is not None and tensor.kind == "parameter":
                out.append(f"PyTorch parameter `{tensor.name}` {tensor.shape} is mapped in part: {wrong}")
        return out

    def refused(self, others: int = 40) -> str:
        """The table of a refused mapping: the rows with a problem first, then those left unmapped,
        then the others (at most ``others`` of them, then how many more)."""
        problems = [e for e in self.entries if _problem(e) is not None or _pieced(e)]
        unmapped = [e for e in self.entries if e.status == "unmapped"]
        rest = [e for e in self.entries if _problem(e) is None and e.status != "unmapped"]
        shown = Table(tuple(problems + unmapped + rest[:others]))
        n = len([e for e in self.entries if _problem(e) is not None]) + len(self.pieces_problems())
        head = f"the mapping has {n} problem{'s' * (n != 1)} (their rows first):"
        more = f"\n... and {len(rest) - others} rows more without a problem" if len(rest) > others else ""
        return f"{head}\n{shown}{more}"

    def rows(self) -> list[dict[str, Any]]:
        """The table as plain data (the JSON report's ``case["mapping"]``)."""
        return [
            {
                "torch": e.torch.name if e.torch else None,
                "torch_shape": list(e.torch.shape) if e.torch else None,
                "jax": "/".join(e.jax.path) if e.jax else None,
                "jax_shape": list(e.jax.shape) if e.jax else None,
                "transform": e.transform,
                "status": e.status,
                "how": e.how,
                **({"take": list(e.take)} if e.take is not None else {}),
                **({"box": [list(b) for b in e.box]} if e.box else {}),
            }
            for e in self.entries
        ]

    def __str__(self) -> str:
        return render(self.rows())


def _pieced(e: Entry) -> bool:
    """Whether a mapped row is a piece (of a fused tensor, of a stacked or fused leaf)."""
    return e.status == "mapped" and (e.take is not None or bool(e.box))


def _problem(e: Entry) -> str | None:
    """The line of an entry that stops the port (an unmatched parameter or leaf, an ambiguity), or None."""
    if e.status == "ambiguous" and e.torch is not None and e.jax is not None and is_stacked(e):
        return (
            f"`{e.torch.name}` {e.torch.shape} -> `{'/'.join(e.jax.path)}` {e.jax.shape} is ambiguous: "
            f"{e.how}; decide with {suggestion(e)}, TRANSFORM one of {', '.join(repr(c) for c in e.choices)}"
        )
    if e.status == "ambiguous" and e.torch is not None and e.jax is not None and (e.take or e.box):
        path = "/".join(e.jax.path)
        return f"`{e.torch.name}` {e.torch.shape} -> `{path}` {e.jax.shape} is ambiguous: {e.how}"
    if e.status == "ambiguous" and e.torch is not None and e.jax is not None:
        return (
            f"`{e.torch.name}` {e.torch.shape} -> `{'/'.join(e.jax.path)}` {e.jax.shape} is "
            f"ambiguous: {e.how}; decide with overrides={{'{e.torch.name}': TRANSFORM}}, "
            f"TRANSFORM one of {', '.join(repr(c) for c in e.choices)}"
        )
    if e.status == "mapped" and e.how.startswith(TIED) and ACCEPTED not in e.how and e.jax is not None:
        alias = e.how.split("`")[1]
        return (
            f"PyTorch ties `{alias}` to `{e.torch.name}` (one tensor) and the port gives it a leaf of its "  # type: ignore[union-attr]
            f"own, `{'/'.join(e.jax.path)}`: the port unties them (the same function and gradient here, "
            "but a training step updates the two apart); tie them in the port (use the tensor's leaf), "
            f"or accept it with overrides={{'{alias}': '{'/'.join(e.jax.path)}'}}"
        )
    if e.status == "unmatched" and e.torch is not None and e.torch.kind == "parameter":
        return f"PyTorch parameter `{e.torch.name}` {e.torch.shape} is unmatched: {e.how}"
    if e.torch is None and e.jax is not None:
        return f"JAX leaf `{'/'.join(e.jax.path)}` {e.jax.shape} is unmatched: {e.how}"
    return None


def one_to_one(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The module pairs (PyTorch module, JAX module) in which each side's module has one partner only:
    a conversion's rows pair a tensor with every leaf it reaches (a tied embedding reaches the head,
    a fused projection three), and only a one-to-one pair names the same module on both sides."""
    jax_of: dict[str, set[str]] = {}
    torch_of: dict[str, set[str]] = {}
    for t, j in pairs:
        jax_of.setdefault(t, set()).add(j)
        torch_of.setdefault(j, set()).add(t)
    return {t: j for t, j in pairs if len(jax_of[t]) == 1 and len(torch_of[j]) == 1}


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """The mapping table as text: ``torch name shape -> jax path shape  transform  (how)``."""
    from crosscheck._errors import one_line  # names come from the user's modules: text, one line each

    cells = []
    for r in rows:
        taken = where(r["torch_shape"], (tuple(r["take"]),)) if r.get("take") else ""
        boxed = where(r["jax_shape"], tuple(tuple(b) for b in r["box"])) if r.get("box") else ""
        left = f"{r['torch']}{taken} {tuple(r['torch_shape'])}" if r["torch"] else "-"
        right = f"{r['jax']}{boxed} {tuple(r['jax_shape'])}" if r["jax"] else "-"
        what = r["transform"] or r["status"].upper()
        cells.append((one_line(left), one_line(right), one_line(str(what)), one_line(str(r["how"]))))
    widths = [
        max([len(c[i]) for c in cells] + [len(h)]) for i, h in enumerate(("PyTorch", "JAX", "transform"))
    ]
    lines = [f"{'PyTorch':<{widths[0]}}    {'JAX':<{widths[1]}}  {'transform':<{widths[2]}}  how"]
    for left, right, what, how in cells:
        lines.append(f"{left:<{widths[0]}} -> {right:<{widths[1]}}  {what:<{widths[2]}}  {how}")
    return "\n".join(lines)


#: A mapping of more rows than this is printed in a report as its notable rows and a count of the rest.
SUMMARY_ROWS = 40


def render_summary(rows: Sequence[Mapping[str, Any]]) -> str:
    """The mapping in a report: every row up to ``SUMMARY_ROWS``; beyond, the rows a reader must see
    (decided by an override, left unmapped, unmatched, ambiguous) and a line counting the others by
    transform (every row: the JSON report's ``case["mapping"]``, or ``print(port.mapping)``)."""
    if len(rows) <= SUMMARY_ROWS:
        return render(rows)
    notable = [r for r in rows if "override" in str(r["how"]) or _unusual(r)]
    counts: dict[str, int] = {}
    for r in rows:
        if r not in notable:
            key = "buffers the JAX model does not use" if r["how"] == UNUSED_BUFFER else r["transform"]
            counts[str(key)] = counts.get(str(key), 0) + 1
    told = ", ".join(f"{n} {key}" for key, n in counts.items())
    line = f"mapping of {len(rows)} rows: {told} (every row: the JSON report's case.mapping)"
    return (render(notable) + "\n" if notable else "") + line


def render_mapping(report: Report, console: Console) -> None:
    """The parameter mapping (the case's ``mapping``), before any numerics."""
    if isinstance(report.case.get("mapping"), list):
        console.print(render_summary(report.case["mapping"]), highlight=False, markup=False)


#: The report's section of a port: its mapping, before the table. It lives with the table, not with the
#: judges: the command that prints a worker's report rebuilds it by its module (``_report.wire``), and
#: this one imports no judge and no oracle.
MAPPING = Section(render_mapping, place="before")


def _unusual(row: Mapping[str, Any]) -> bool:
    return row["status"] != "mapped" and row["how"] != UNUSED_BUFFER


def _ordinary(torch: Sequence[Tensor], jax: Sequence[Tensor]) -> list[Entry]:
    """The matching of ``torch`` onto ``jax`` a stacked leaf's layers get (``stacked.stack``): by name and
    layout, then the fused, split and renamed patterns (``fused``) on what is left; several rows for a
    fused tensor split."""
    index, used, out = index_leaves(jax), set[tuple[str, ...]](), list[Entry]()
    for t in torch:
        out.append(match(t, index, used))
        if out[-1].jax is not None:
            used.add(out[-1].jax.path)
    return fused.complete(out, (), jax, index, used)


#: The start of a tied alias's row (``fused.tied``), and what an override of it adds.
TIED = "tied:"
ACCEPTED = "the port unties them, accepted by override"


def _listed(found: Entry | list[Entry]) -> list[Entry]:
    return found if isinstance(found, list) else [found]


def _decided(alias: Tensor, entries: Sequence[Entry]) -> bool:
    return any(e.how.startswith(f"{TIED} `{alias.name}`") for e in entries)


def build(
    torch: Sequence[Tensor],
    jax: Sequence[Tensor],
    overrides: Mapping[str, Any] | None = None,
    problems: list[ValueError] | None = None,
) -> Table:
    """The mapping table of ``torch`` onto ``jax`` (see the module docstring), ``overrides`` applied;
    with ``problems``, the overrides that do not fit are appended to it and left out (``decide``).

    Raises:
        ValueError: without ``problems``: an override that names no PyTorch tensor, names a JAX leaf
            that does not exist, or asks for a transform that does not fit the shapes (one line each,
            with the fix).
    """
    aliases = [t for t in torch if t.tied]  # tied: mapped only where the port has a leaf of their own
    torch = [t for t in torch if not t.tied]
    by_name = {".".join(t.path): t for t in torch}
    leaves = {"/".join(j.path): j for j in jax}
    index = index_leaves(jax)  # by module and leaf name: a lookup per tensor, not a scan (10 000 tensors)
    chosen = decide(overrides or {}, {**by_name, **{a.name: a for a in aliases}}, leaves, index, problems)
    entries: list[Entry] = []
    used: set[tuple[str, ...]] = set()
    for alias in [a for a in aliases if a.name in chosen]:  # an untied leaf the user accepts
        for entry in _listed(chosen.pop(alias.name)):
            if entry.jax is not None and alias.tied in by_name:
                used.add(entry.jax.path)
                how = f"{TIED} `{alias.name}` is `{alias.tied}`; {ACCEPTED}; {entry.how}"
                entries.append(dataclasses.replace(entry, torch=by_name[alias.tied], how=how))
    aliases = [a for a in aliases if not _decided(a, entries)]
    for t in torch:
        found = chosen[t.name] if t.name in chosen else match(t, index, used)
        for entry in found if isinstance(found, list) else [found]:  # a split by override: several
            if entry.jax is not None:
                used.add(entry.jax.path)
            entries.append(entry)
    entries = fused.complete(entries, aliases, jax, index, used)  # fused, split, renamed, tied
    entries = stack(entries, jax, used, _ordinary)  # what is left: one leaf (L, ...) for L layers' tensors
    modules: dict[tuple[str, ...], list[str]] = {}
    for t in torch:
        modules.setdefault(canonical(t.module), []).append(t.name)
    for j in jax:
        if j.path not in used:
            near = modules.get(canonical(j.module), [])
            hint = (
                f"PyTorch tensors of that module: {', '.join(near)}"
                if near
                else "no PyTorch module of that name"
            )
            fix = (
                None if near else stacked_hint(j, torch)
            ) or f"map one with overrides={{NAME: '{'/'.join(j.path)}'}}"
            entries.append(Entry(None, j, None, f"{hint}; {fix}"))
    return Table(tuple(entries))
