"""The closed vocabularies that structural signatures are built from: decision, coupling and
effect kinds, each a class registered by name (``interlock.core.registry``: ``DECISION_KINDS``,
``COUPLING_KINDS``, ``EFFECT_KINDS``). A kind's facts (what it reads, whether its outcomes carry an
amount, which decisions a coupling can bind, what an effect's target is) are attributes of its
class; the catalog's checks and the rewrite operators derive from them, so a new kind is its class
and its registration line.

Names here are kinds, never domain words: renaming a domain cannot change its signature.
"""
