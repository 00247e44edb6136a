"""Document generators: docs/tour.md and docs/reproductions.md, written from real outputs.

:mod:`depthlab.docgen.tour` re-runs every command the tour shows and pastes its output under it;
:mod:`depthlab.docgen.reproductions` runs every registered reproduction and writes their tables. Neither
is a claim: the claims live in :mod:`depthlab.reproduce`.
"""
