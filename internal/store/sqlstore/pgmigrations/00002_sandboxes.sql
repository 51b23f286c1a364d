-- +goose Up
CREATE TABLE sandboxes (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspaces(id),
    backend           TEXT NOT NULL,
    backend_ref       TEXT NOT NULL DEFAULT '',
    image             TEXT NOT NULL,
    spec              TEXT NOT NULL,
    state             TEXT NOT NULL,
    token_hash        TEXT NOT NULL DEFAULT '',
    replaces          TEXT NOT NULL DEFAULT '',
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    last_activity_at  BIGINT NOT NULL
);
CREATE INDEX sandboxes_workspace ON sandboxes(workspace_id);
CREATE INDEX sandboxes_state ON sandboxes(state);

CREATE TABLE execs (
    id              TEXT PRIMARY KEY,
    sandbox_id      TEXT NOT NULL,
    workspace_id    TEXT NOT NULL,
    argv            TEXT NOT NULL,
    state           TEXT NOT NULL,
    exit_code       INTEGER NOT NULL DEFAULT 0,
    signal          INTEGER NOT NULL DEFAULT 0,
    timed_out       INTEGER NOT NULL DEFAULT 0,
    oom             INTEGER NOT NULL DEFAULT 0,
    cpu_ns          BIGINT NOT NULL DEFAULT 0,
    peak_mem_bytes  BIGINT NOT NULL DEFAULT 0,
    stdout_bytes    BIGINT NOT NULL DEFAULT 0,
    stderr_bytes    BIGINT NOT NULL DEFAULT 0,
    started_at      BIGINT NOT NULL,
    finished_at     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX execs_sandbox ON execs(sandbox_id, started_at);
CREATE INDEX execs_workspace ON execs(workspace_id, started_at);

-- +goose Down
DROP TABLE execs;
DROP TABLE sandboxes;
