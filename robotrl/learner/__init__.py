"""The learner: chunk-level replay (online + anchor), RAPI and BC updates, weight publishing.

``replay`` and ``anchor`` hold the data, ``rapi`` and ``bc`` are the algorithms behind
the :class:`~robotrl.core.protocols.Algorithm` protocol, ``loop`` drives ingest and
update groups, ``checkpoint`` saves and resumes, ``main`` composes them for the
``robotrl learner`` role.
"""
