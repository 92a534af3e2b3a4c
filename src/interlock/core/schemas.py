"""The pyarrow schema of every Parquet artifact, in one place.

Nested content (case rows, rules, check specs) is canonical JSON in a string column, so the
schemas stay fixed while kinds evolve.
"""

from collections.abc import Sequence

import pyarrow as pa

s, i32, i64, b, f64 = pa.string(), pa.int32(), pa.int64(), pa.bool_(), pa.float64()

DOMAINS = pa.schema([
    ("domain_id", s), ("name", s), ("area", s), ("split", s), ("signature", s),
    ("decision_kind", s), ("coupling_kinds", pa.list_(s)), ("effect_kinds", pa.list_(s)),
    ("case_table", s), ("policy_file", s), ("summary", s), ("spec", s),
])

BLUEPRINTS = pa.schema([
    ("task_id", s), ("domain_id", s), ("pool", s), ("seed", i64),
    ("decisions", i32), ("effects_per_decision", i32), ("couplings", i32), ("distractors", i32),
    ("cases", s), ("options", s), ("params", s), ("groups", s),
    ("distractor_rows", s), ("distractor_clauses", s), ("fingerprint", s), ("skeleton", s),
])

GRAPH_TABLES = {
    "tasks": pa.schema([("task_id", s), ("domain_id", s), ("pool", s), ("effects_per_decision", i32)]),
    "nodes": pa.schema([
        ("task_id", s), ("node_id", s), ("kind", s), ("subkind", s), ("ref", s), ("label", s),
        ("distractor", b), ("attrs", s),
    ]),
    "edges": pa.schema([("task_id", s), ("edge_id", s), ("kind", s), ("source", s), ("target", s)]),
    "hyperedges": pa.schema([
        ("task_id", s), ("hyperedge_id", s), ("kind", s), ("clause", s), ("params", s),
    ]),
    "hyperedge_members": pa.schema([
        ("task_id", s), ("hyperedge_id", s), ("node_id", s), ("position", i32),
    ]),
}

PACK_TABLES = {
    "tasks": pa.schema([("task_id", s), ("domain_id", s), ("pool", s)]),
    "workspace_files": pa.schema([("task_id", s), ("path", s), ("content", s)]),
    "evidence_index": pa.schema([
        ("task_id", s), ("node_id", s), ("path", s), ("locator", s), ("ref", s), ("expected", s),
    ]),
    "requests": pa.schema([("task_id", s), ("request", s)]),
    "contracts": pa.schema([
        ("task_id", s), ("deliverable_id", s), ("kind", s), ("node_ids", pa.list_(s)), ("path", s),
        ("key", s), ("realization", s), ("formats", s),
    ]),
    "rubrics": pa.schema([
        ("task_id", s), ("criterion_id", s), ("kind", s), ("node_ids", pa.list_(s)),
        ("mandatory", b), ("weight", f64), ("description", s),
    ]),
    "checks": pa.schema([("task_id", s), ("criterion_id", s), ("spec", s)]),
    "reference_solutions": pa.schema([
        ("task_id", s), ("step", i32), ("tool", s), ("arguments", s), ("observation", s),
    ]),
}

#: what the model authors (``generator=llm``) leave beside the packs, row-group aligned with them:
#: the tasks they did not make into a pack and why, and every call (no seconds: those are measured,
#: in :data:`AUTHOR_TIMINGS`); the template generator writes neither
AUTHORING_TABLES = {
    "unwritten": pa.schema([("task_id", s), ("domain_id", s), ("pool", s), ("reason", s)]),
    "author_calls": pa.schema([
        ("task_id", s), ("role", s), ("attempt", i32), ("prompt_tokens", i64), ("completion_tokens", i64),
        ("accepted", b), ("problem", s),
    ]),
}
#: measured seconds of each author call (no stage reads them)
AUTHOR_TIMINGS = pa.schema([("task_id", s), ("role", s), ("attempt", i32), ("seconds", f64)])

#: a rollout per row; ``sampled`` (version 2): per assistant message, the token ids its backend
#: sampled (:class:`~interlock.core.backend.SampledTokens`), which training learns. A table's version
#: is its ``interlock.schema`` metadata: one of an older version is refused with what to re-run.
TRAJECTORIES = pa.schema([
    ("rollout_id", s), ("task_id", s), ("domain_id", s), ("pool", s), ("policy", s),
    ("attempt", i32), ("seed", i64), ("messages", s), ("turns", i32), ("tool_calls", i32),
    ("invalid_calls", i32), ("prompt_tokens", i64), ("generated_tokens", i64), ("finish_reason", s),
    ("final_files", s), ("diff", s), ("sampled", s),
], metadata={"interlock.schema": "trajectories/2"})
#: what RFT trains on (the ``sample`` stage): trajectories with where each came from (``policy``: an
#: accepted rollout; ``rti``: a kept correction), its training weight, and the first message whose
#: assistant turns carry loss (0: every assistant turn)
TRAINING_SET = pa.schema([*TRAJECTORIES, ("source", s), ("weight", f64), ("loss_from_message", i32)],
                         metadata={"interlock.schema": "training_set/2"})
#: the ``intervene`` stage: one row per rollout the configured judge rejected; ``turn``: the
#: intervention point (index of the assistant turn after which the rollout was bound to fail; null
#: where none was found), ``prefix_messages``: messages kept from the original, ``corrected``: the
#: corrected trajectory (a TRAJECTORIES row as JSON; null where none was made), ``nll``: mean token
#: negative log-likelihood of the corrected turns under the starting checkpoint
INTERVENTIONS = pa.schema([
    ("rollout_id", s), ("task_id", s), ("domain_id", s), ("turn", i32), ("failure", s),
    ("failed_criteria", pa.list_(s)), ("critic_note", s), ("prefix_messages", i32), ("corrected", s),
    ("verified", b), ("verdict", s), ("nll", f64), ("weight", f64), ("kept", b), ("reason", s),
    ("source", s),
])
VERDICTS = pa.schema([
    ("rollout_id", s), ("task_id", s), ("judge", s), ("criterion_id", s), ("passed", b),
    ("evidence", s),
])

REVIEW_TABLES = {
    "coverage": pa.schema([("task_id", s), ("relation", s), ("ref", s), ("problem", s)]),
    "critic": pa.schema([("task_id", s), ("criterion_id", s), ("problem", s)]),
    "leaks": pa.schema([("task_id", s), ("problem", s)]),
    "controls": pa.schema([
        ("task_id", s), ("criterion_id", s), ("control", s), ("passed", b), ("expected", b),
        ("evidence", s),
    ]),
    #: every mutant of the mutation controls, and whether its criterion's check failed on it
    "mutations": pa.schema([
        ("task_id", s), ("criterion_id", s), ("kind", s), ("mutant", s), ("killed", b), ("evidence", s),
    ]),
    "verdicts": pa.schema([
        ("task_id", s), ("domain_id", s), ("pool", s), ("coverage_ok", b), ("critic_ok", b),
        ("leaks_ok", b), ("controls_ok", b), ("mutations_ok", b), ("execution_ok", b),
        ("validation_passed", b), ("admitted", b),
        ("reasons", pa.list_(s)),
    ]),
    "admitted": pa.schema([("task_id", s), ("domain_id", s), ("pool", s)]),
    "validation": TRAJECTORIES,
    "validation_verdicts": VERDICTS,
}

#: recursive synthesis (the ``grow`` stage): each validated child's lineage (``parents``: the task
#: it rewrote, and for a join the second one; ``contract``: its transformation contract as JSON)
LINEAGE = pa.schema([
    ("task_id", s), ("domain_id", s), ("round", i32), ("operator", s), ("parents", pa.list_(s)),
    ("contract", s),
])
#: every refused candidate, with its operator and the first reason (``kind``: not applicable,
#: compile, review, conformance, oracle or duplicate; ``reasons``: all of them)
RST_REJECTIONS = pa.schema([
    ("round", i32), ("index", i32), ("task_id", s), ("operator", s), ("parents", pa.list_(s)),
    ("kind", s), ("reasons", pa.list_(s)),
])
#: one row per round and sampler: candidates, validated, the pool, the children's size, the
#: similarity tail (``sampler`` = the grow stage's own, or ``compare_with``'s: report only); no
#: timings (the artifact is the same bytes on every run; seconds go to metrics/grow.json)
RST_ROUNDS = pa.schema([
    ("sampler", s), ("round", i32), ("candidates", i32), ("validated", i32), ("pool", i32),
    ("mean_nodes", f64), ("mean_reference_calls", f64),
    ("nearest_median", f64), ("nearest_p90", f64), ("tail_share", f64),
    ("validated_by_operator", s), ("rejected_by_operator", s),
])

#: measured seconds per rollout: a table of its own, which no later stage reads
ROLLOUT_TIMINGS = pa.schema([("rollout_id", s), ("seconds", f64)])

#: records the agent judge found changed that no decision required (record None: a whole file)
COLLATERAL = pa.schema([("rollout_id", s), ("task_id", s), ("file", s), ("record", s), ("reason", s)])
#: the ``judge`` stage's folder: both judges' verdicts over the same rollout pool, aligned by
#: row group with the trajectories, and the agent judge's collateral flags


def judge_tables(graders: Sequence[str]) -> dict[str, pa.Schema]:
    """The ``judge`` stage's tables: one of verdicts per grader, and the truth's collateral."""
    return {**dict.fromkeys(graders, VERDICTS), "collateral": COLLATERAL}


#: a checkpoint's manifest (``manifest.parquet`` beside the weights): one row, no timings;
#: ``dtype`` is the stored weights', ``compute_dtype`` what the training that made them computed in
#: (bfloat16: autocast over fp32 weights; null where no training here made them)
MODEL_MANIFEST = pa.schema([
    ("name", s), ("source", s), ("origin", s), ("origin_sha256", s), ("architecture", s),
    ("parameters", i64), ("dtype", s), ("compute_dtype", s), ("vocab_size", i64), ("max_context", i64),
    ("chat_template_sha256", s), ("notes", s),
    ("files", pa.list_(pa.struct([("path", s), ("bytes", i64), ("sha256", s)]))),
])

#: a fine-tuned checkpoint's training record (``training.parquet`` beside the weights): one row,
#: what it was trained from and on, and the loss of every optimizer step (no timings)
TRAINING_MANIFEST = pa.schema([
    ("name", s), ("start", s), ("start_sha256", s), ("data_sha256", s), ("examples", i64),
    ("too_long", i64), ("nothing_to_learn", i64), ("tokens", i64), ("trained_tokens", i64),
    ("epochs", i64), ("steps", i64), ("seed", i64), ("recipe", s),
    ("losses", pa.list_(f64)), ("step_tokens", pa.list_(i64)), ("learning_rates", pa.list_(f64)),
    ("processes", i64),  # the processes that trained it together (accelerate launch --num_processes)
])

#: one evaluated episode (the ``evaluate`` stage): who (model), where (pool: ``dev``, ``benchmark``
#: or an external adapter's name), how it was graded; ``completion_gap`` and ``primary_passed`` are
#: null where a benchmark has no such notion (see :mod:`interlock.evaluation.metrics`)
EVAL_RESULTS = pa.schema([
    ("model", s), ("seed", i32), ("pool", s), ("rollout_id", s), ("task_id", s), ("domain_id", s),
    ("attempt", i32),
    ("passed", b), ("score", f64), ("criterion_pass_rate", f64), ("criteria", i32),
    ("primary_passed", b), ("completion_gap", b), ("turns", i32), ("tool_calls", i32),
    ("finish_reason", s),
])
#: the ``evaluate`` stage's folder: every model's rollouts (ids prefixed by the model), their
#: per-episode results and per-criterion verdicts (the agent judge's compiled checks), aligned by
#: row group (one model x pool at a time)
EVALUATION_TABLES = {"trajectories": TRAJECTORIES, "results": EVAL_RESULTS, "verdicts": VERDICTS}
