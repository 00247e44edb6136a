"""Document generators: docs/tour.md, docs/reproductions.md and docs/doctor.md written from real outputs,
and the tables of README.md and docs/ written from the code's own declarations.

:mod:`depthlab_lab.docgen.tour` re-runs every command the tour shows and pastes its output under it;
:mod:`depthlab_lab.docgen.reproductions` runs every registered reproduction and writes their tables;
:mod:`depthlab_lab.docgen.doctor` scores the doctor on its held-out grid; :mod:`depthlab_lab.docgen.tables`
(``python -m depthlab_lab.docgen.tables``) rewrites the wrappings and families tables. None is a claim:
the claims live in :mod:`depthlab_lab.reproduce`.
"""
