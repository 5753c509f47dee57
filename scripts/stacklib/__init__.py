"""scripts/stack's modules: standard library only, so the stack runs before any virtualenv.

config (environment, paths, errors), files (templates, private files), procs (spawn, stop,
pid files, ports), maven (downloads into the cache), secure (CA, certificates, passwords),
kafka, es and es_secure (one module per kind of server), cli (the commands).
"""
