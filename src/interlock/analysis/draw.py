"""Draw a completion graph to PNG: evidence, decisions and effects in three columns, grounding
and realization edges in distinct styles, and every coupling hyperedge as a shaded region
around its member decisions, labelled with its kind, clause and parameters.

Layout: decisions are ordered so that the members of each hyperedge sit together (a hyperedge
is then one contiguous region); each decision has a horizontal band holding the evidence that
grounds only it (its record, its options) on the left and its effects on the right. Evidence
shared by several decisions (policy clauses) sits above the bands; evidence that grounds
nothing (distractors) sits below them, greyed and dashed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch, Polygon

from interlock.synthesis.graph import CompletionGraph, Hyperedge, Node

# geometry, in inches (the axes span the figure, one data unit is one inch)
WIDTH = 10.0
COLUMN_X = {"evidence": 1.55, "decision": 5.0, "effect": 8.45}
NODE_W, NODE_H = 2.1, 0.4
PITCH = 0.5  # vertical distance between stacked nodes
BAND_GAP = 0.12  # extra space between decision bands
HULL_LABEL = 0.5  # space above a hyperedge's first member for its label
HULL_PAD = 0.13
DPI = 150

STYLE = {
    "record": {"face": "#dbeafe", "edge": "#1e40af", "box": "square,pad=0"},
    "clause": {"face": "#ede9fe", "edge": "#5b21b6", "box": "square,pad=0"},
    "decision": {"face": "#ffedd5", "edge": "#c2410c", "box": "round,pad=0,rounding_size=0.2"},
    "effect": {"face": "#dcfce7", "edge": "#15803d"},
    "distractor": {"face": "#f3f4f6", "edge": "#9ca3af"},
}
GROUNDING_COLOR = "#1e3a8a"
REALIZATION_COLOR = "#15803d"
HYPER_COLORS = ("#db2777", "#0d9488", "#7c3aed", "#d97706", "#dc2626", "#2563eb")
TEXT = "#111827"
#: the outline of a node a recursive-synthesis rewrite added or changed
CHANGE_COLORS = {"added": "#ea580c", "changed": "#ca8a04"}
MUTED = "#6b7280"


@dataclass
class _Layout:
    y: dict[str, float]  # node id -> centre y
    decisions: list[str]  # decision ids, top to bottom
    groups: list[tuple[Hyperedge, float]]  # hyperedge opening a group, and the y of its label
    height: float
    header_y: float


def draw_graph(graph: CompletionGraph, path: Path | str, changed: Mapping[str, str] | None = None) -> Path:
    """Write ``graph`` as a PNG to ``path`` (parent folders are created) and return the path.
    ``changed``: node id -> "added" or "changed" (a child of recursive synthesis against its
    parent), drawn with a heavy outline and tagged."""
    changed = dict(changed or {})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    colors = {h.hyperedge_id: HYPER_COLORS[i % len(HYPER_COLORS)] for i, h in enumerate(graph.hyperedges)}
    clause_color = {h.clause: colors[h.hyperedge_id] for h in graph.hyperedges}
    legend = _legend_handles(graph, colors, changed)
    legend_rows = math.ceil(len(legend) / 2)
    legend_h = 0.35 + 0.22 * legend_rows
    layout = _layout(graph, top_margin=1.05, bottom_margin=legend_h + 0.2)

    fig = Figure(figsize=(WIDTH, layout.height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(0, layout.height)
    ax.set_axis_off()

    _title(ax, graph, layout)
    for hyper in graph.hyperedges:
        _hyperedge(ax, graph, hyper, layout, colors[hyper.hyperedge_id])
    for edge in graph.edges:
        _edge(ax, graph, edge.kind, edge.source, edge.target, layout,
              clause_color.get(edge.source, GROUNDING_COLOR))
    for node in graph.nodes:
        _node(ax, node, layout.y[node.node_id], clause_color.get(node.node_id), graph,
              changed.get(node.node_id))

    ax.legend(handles=legend, loc="lower center", bbox_to_anchor=(WIDTH / 2, 0.12),
              bbox_transform=ax.transData, ncol=2, fontsize=7.5, frameon=True, framealpha=0.95,
              edgecolor="#d1d5db", handlelength=2.6, columnspacing=2.0, title="legend",
              title_fontsize=8)
    fig.savefig(path, format="png", dpi=DPI, facecolor="white")
    return path


# ----------------------------------------------------------------------------- layout

def _decision_order(graph: CompletionGraph) -> list[tuple[Hyperedge | None, list[str]]]:
    """Decisions in graph order, except that each hyperedge's members are pulled together."""
    placed: set[str] = set()
    opened: set[str] = set()
    groups: list[tuple[Hyperedge | None, list[str]]] = []
    decisions = [n.node_id for n in graph.of_kind("decision")]
    for decision in decisions:
        if decision in placed:
            continue
        hyper = next((h for h in graph.hyperedges
                      if decision in h.members and h.hyperedge_id not in opened), None)
        if hyper is None:
            groups.append((None, [decision]))
            placed.add(decision)
            continue
        opened.add(hyper.hyperedge_id)
        members = [d for d in decisions if d in hyper.members and d not in placed]
        placed.update(members)
        groups.append((hyper, members))
    return groups


def _layout(graph: CompletionGraph, top_margin: float, bottom_margin: float) -> _Layout:
    grounds: dict[str, list[str]] = {n.node_id: [] for n in graph.of_kind("evidence")}
    for edge in graph.edges:
        if edge.kind == "grounding":
            grounds[edge.source].append(edge.target)
    shared = [n for n in graph.of_kind("evidence")
              if grounds[n.node_id] and (n.subkind == "clause" or len(set(grounds[n.node_id])) > 1)]
    shared.sort(key=lambda n: (n.subkind != "clause", _clause_number(n), n.node_id))
    loose = [n for n in graph.of_kind("evidence") if not grounds[n.node_id]]
    elsewhere = {n.node_id for n in shared + loose}
    private: dict[str, list[str]] = {n.node_id: [] for n in graph.of_kind("decision")}
    for node in graph.of_kind("evidence"):
        if node.node_id not in elsewhere:
            private[grounds[node.node_id][0]].append(node.node_id)

    y: dict[str, float] = {}
    cursor = -top_margin  # going down from 0, shifted to positive once the height is known
    header_y = cursor
    cursor -= 0.35
    for node in shared:
        y[node.node_id] = cursor - NODE_H / 2
        cursor -= PITCH
    cursor -= 0.25
    order: list[str] = []
    groups: list[tuple[Hyperedge, float]] = []
    for hyper, members in _decision_order(graph):
        if hyper is not None:
            groups.append((hyper, cursor))
            cursor -= HULL_LABEL
        for decision in members:
            effects = [n.node_id for n in graph.targets(decision, "realization")]
            rows = max(len(private[decision]), len(effects), 1)
            top = cursor - NODE_H / 2
            centre = top - (rows - 1) * PITCH / 2
            y[decision] = centre
            for column in (private[decision], effects):
                start = centre + (len(column) - 1) * PITCH / 2
                for i, node_id in enumerate(column):
                    y[node_id] = start - i * PITCH
            cursor -= rows * PITCH + BAND_GAP
            order.append(decision)
        cursor -= 0.25 if hyper is not None else 0
    if loose:
        cursor -= 0.2
        for node in loose:
            y[node.node_id] = cursor - NODE_H / 2
            cursor -= PITCH
    height = -cursor + bottom_margin
    shifted = {k: v + height for k, v in y.items()}
    return _Layout(shifted, order, [(h, top + height) for h, top in groups], height, header_y + height)


def _clause_number(node: Node) -> int:
    try:
        return int(node.ref.split("-")[1])
    except (IndexError, ValueError):
        return 0


# ----------------------------------------------------------------------------- drawing

def _title(ax, graph: CompletionGraph, layout: _Layout) -> None:
    evidence = graph.of_kind("evidence")
    distractors = sum(n.distractor for n in evidence)
    decisions, effects = graph.of_kind("decision"), graph.of_kind("effect")
    ax.text(0.25, layout.height - 0.3, graph.task_id, fontsize=12, fontweight="bold", color=TEXT,
            va="center")
    ax.text(0.25, layout.height - 0.6,
            f"domain {graph.domain_id}  ·  pool {graph.pool}  ·  {len(decisions)} decisions, "
            f"{len(effects)} effects, {len(evidence)} evidence ({distractors} distractor), "
            f"{len(graph.hyperedges)} coupling hyperedge{'' if len(graph.hyperedges) == 1 else 's'}",
            fontsize=8.5, color=MUTED, va="center")
    for kind, title, count in (("evidence", "evidence", len(evidence)),
                               ("decision", "decisions", len(decisions)),
                               ("effect", "effects", len(effects))):
        ax.text(COLUMN_X[kind], layout.header_y, f"{title} ({count})", fontsize=9.5,
                fontweight="bold", color=TEXT, ha="center", va="center")
        ax.plot([COLUMN_X[kind] - NODE_W / 2, COLUMN_X[kind] + NODE_W / 2],
                [layout.header_y - 0.15] * 2, color="#d1d5db", lw=1)


def _node(ax, node: Node, y: float, clause_color: str | None, graph: CompletionGraph,
          change: str | None = None) -> None:
    x = COLUMN_X[node.kind]
    key = "distractor" if node.distractor else (
        "clause" if node.subkind == "clause" else node.kind if node.kind != "evidence" else "record")
    style = STYLE[key]
    edge = CHANGE_COLORS[change] if change else clause_color or style["edge"]
    common = {"facecolor": style["face"], "edgecolor": edge, "zorder": 3,
              "linewidth": 3.2 if change else 2.2 if clause_color else 1.2,
              "linestyle": "--" if node.distractor else "-"}
    left, bottom = x - NODE_W / 2, y - NODE_H / 2
    if node.kind == "effect":
        skew = 0.12
        ax.add_patch(Polygon([(left + skew, bottom + NODE_H), (left + NODE_W + skew, bottom + NODE_H),
                              (left + NODE_W - skew, bottom), (left - skew, bottom)], closed=True,
                             **common))
    else:
        shape = STYLE["decision" if node.kind == "decision" else "record"]["box"]
        ax.add_patch(FancyBboxPatch((left, bottom), NODE_W, NODE_H, boxstyle=shape, **common))
    colour = MUTED if node.distractor else TEXT
    ax.text(x, y + 0.075, _short(f"{node.node_id}  {node.ref}", 26), fontsize=7.5, fontweight="bold",
            color=colour, ha="center", va="center", zorder=4)
    ax.text(x, y - 0.095, _short(_subtitle(node, graph), 32), fontsize=6.3, color=MUTED,
            ha="center", va="center", zorder=4, style="italic" if node.distractor else "normal")
    if change:
        ax.text(left + NODE_W, bottom + NODE_H, f" {change} ", fontsize=6, fontweight="bold", color="white",
                ha="right", va="center", zorder=5,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": CHANGE_COLORS[change], "edgecolor": "none"})


def _subtitle(node: Node, graph: CompletionGraph) -> str:
    if node.kind == "decision":
        return f"-> {node.attrs.get('outcome')}  (by {node.attrs.get('basis')})"
    if node.kind == "effect":
        return node.subkind
    if node.subkind == "clause":
        text = f"{node.attrs['coupling']} clause" if "coupling" in node.attrs else "decision rule"
        hypers = [h.hyperedge_id for h in graph.hyperedges if h.clause == node.node_id]
        if hypers:
            text += " of " + ", ".join(hypers)
    else:
        text = node.subkind
    return f"{text} · distractor" if node.distractor else text


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _edge(ax, graph: CompletionGraph, kind: str, source: str, target: str, layout: _Layout,
          color: str) -> None:
    src, dst = graph.by_id[source], graph.by_id[target]
    start = (COLUMN_X[src.kind] + NODE_W / 2 + (0.12 if src.kind == "effect" else 0), layout.y[source])
    end = (COLUMN_X[dst.kind] - NODE_W / 2 - (0.12 if dst.kind == "effect" else 0), layout.y[target])
    if kind == "grounding":
        style = {"color": color, "linestyle": "-", "linewidth": 0.9, "alpha": 0.55}
    else:
        style = {"color": REALIZATION_COLOR, "linestyle": (0, (4, 2.5)), "linewidth": 1.2, "alpha": 0.9}
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8, shrinkA=1, shrinkB=1,
                                 zorder=2, **style))


def _hyperedge(ax, graph: CompletionGraph, hyper: Hyperedge, layout: _Layout, color: str) -> None:
    """A shaded rounded region around each contiguous run of members; runs of one hyperedge that
    another hyperedge split apart are joined by a dashed line."""
    positions = sorted(layout.decisions.index(m) for m in hyper.members)
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    label_top = next((top for h, top in layout.groups if h.hyperedge_id == hyper.hyperedge_id), None)
    level = sum(1 for h in graph.hyperedges[:graph.hyperedges.index(hyper)]
                if set(h.members) & set(hyper.members))
    pad = HULL_PAD + 0.07 * level
    x0 = COLUMN_X["decision"] - NODE_W / 2 - pad
    width = NODE_W + 2 * pad
    boxes = []
    for i, run in enumerate(runs):
        top = layout.y[layout.decisions[run[0]]] + NODE_H / 2 + pad
        if i == 0 and label_top is not None:
            top = label_top - 0.05
        bottom = layout.y[layout.decisions[run[-1]]] - NODE_H / 2 - pad
        boxes.append((top, bottom))
        ax.add_patch(FancyBboxPatch((x0, bottom), width, top - bottom,
                                    boxstyle="round,pad=0,rounding_size=0.18", facecolor=color,
                                    alpha=0.13, edgecolor="none", zorder=1))
        ax.add_patch(FancyBboxPatch((x0, bottom), width, top - bottom,
                                    boxstyle="round,pad=0,rounding_size=0.18", facecolor="none",
                                    edgecolor=color, linewidth=1.6, zorder=1.5))
    for (_, bottom), (top, _) in zip(boxes, boxes[1:], strict=False):
        ax.plot([x0 + width - 0.1] * 2, [bottom, top], color=color, linestyle=":", linewidth=1.6,
                zorder=1.5)
    clause = graph.by_id[hyper.clause]
    numbers = ", ".join(f"{k} {v}" for k, v in sorted(hyper.params.items())
                        if isinstance(v, int | float) and not isinstance(v, bool))
    group = hyper.params.get("group")
    detail = " · ".join(part for part in (f"group {group}" if group else "", numbers,
                                          f"{len(hyper.members)} decisions") if part)
    top = boxes[0][0]
    ax.text(x0 + 0.12, top - 0.14, f"{hyper.hyperedge_id}  {hyper.kind}  ·  clause {clause.ref}",
            fontsize=7.5, fontweight="bold", color=color, va="center", zorder=4)
    ax.text(x0 + 0.12, top - 0.32, _short(detail, 44), fontsize=6.5, color=color, va="center", zorder=4)


def _legend_handles(graph: CompletionGraph, colors: dict[str, str], changed: Mapping[str, str]) -> list:
    handles: list = [
        Patch(facecolor=STYLE["record"]["face"], edgecolor=STYLE["record"]["edge"],
              label="evidence node: record / option (rectangle)"),
        Patch(facecolor=STYLE["clause"]["face"], edgecolor=STYLE["clause"]["edge"],
              label="evidence node: policy clause (rectangle)"),
        Patch(facecolor=STYLE["distractor"]["face"], edgecolor=STYLE["distractor"]["edge"], linestyle="--",
              label="distractor evidence (grey, dashed: grounds nothing)"),
        Patch(facecolor=STYLE["decision"]["face"], edgecolor=STYLE["decision"]["edge"],
              label="decision node: intended outcome and basis (rounded)"),
        Patch(facecolor=STYLE["effect"]["face"], edgecolor=STYLE["effect"]["edge"],
              label="effect node: downstream record (slanted)"),
        Line2D([], [], color=GROUNDING_COLOR, lw=1.2, alpha=0.7, marker=">", markevery=[-1],
               markersize=4, label="grounding edge: evidence -> decision (solid)"),
        Line2D([], [], color=REALIZATION_COLOR, lw=1.2, linestyle=(0, (4, 2.5)), marker=">",
               markevery=[-1], markersize=4, label="realization edge: decision -> effect (dashed)"),
    ]
    for change in sorted(set(changed.values())):
        handles.append(Patch(facecolor="white", edgecolor=CHANGE_COLORS[change], lw=3.2,
                             label=f"{change} by the rewrite (against its parent)"))
    for hyper in graph.hyperedges:
        members = list(hyper.members)
        names = ", ".join(members) if len(members) <= 5 else ", ".join(members[:4]) + f", … ({len(members)})"
        handles.append(Patch(facecolor=colors[hyper.hyperedge_id] + "33",
                             edgecolor=colors[hyper.hyperedge_id], lw=1.6,
                             label=f"{hyper.hyperedge_id} coupling hyperedge ({hyper.kind}, clause "
                                   f"{graph.by_id[hyper.clause].ref}) over {names}"))
    return handles
