"""The online loop on a Ray cluster: `openclaw-rl serve --ray [ADDRESS]`.

    client ──▶ gateway ──session affinity──▶ replica 0..N-1 (serving app + engine)
                                                 │ turns, next states   ▲ weights v (object store)
                                                 ▼                      │
                                        store (SQLite WAL / PostgreSQL) │
                                                 │                      │
                            judge 0..J-1 ◀───────┤                      │
                               │ samples         ▼                      │
                               └──────────▶ store ──▶ trainer ──────────┘

`deploy.py` connects and places the actors, `actors.py` holds them (each runs the same
code as one process does), `gateway.py` is the router. Ray is an optional dependency
(`pip install 'openclaw-rl[ray]'`); nothing here is imported without `--ray`.
"""
