"""Static analyses, run once per function; results are stored as node annotations
(``pyct.anno.Key``) that the converters read. Order: activity, liveness, reaching_defs."""
