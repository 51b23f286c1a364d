-- +goose Up
CREATE TABLE repos (
    id              TEXT PRIMARY KEY,
    url             TEXT NOT NULL UNIQUE,
    path            TEXT NOT NULL,
    default_branch  TEXT NOT NULL DEFAULT '',
    size_bytes      BIGINT NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL,
    last_fetch_at   BIGINT NOT NULL,
    last_used_at    BIGINT NOT NULL
);

CREATE TABLE pristines (
    id            TEXT PRIMARY KEY,
    repo_id       TEXT NOT NULL REFERENCES repos(id),
    commit_sha    TEXT NOT NULL,
    path          TEXT NOT NULL,
    size_bytes    BIGINT NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL,
    last_used_at  BIGINT NOT NULL,
    UNIQUE (repo_id, commit_sha)
);

CREATE TABLE workspaces (
    id           TEXT PRIMARY KEY,
    repo_id      TEXT NOT NULL REFERENCES repos(id),
    pristine_id  TEXT REFERENCES pristines(id),
    parent_id    TEXT,
    ref          TEXT NOT NULL,
    base_commit  TEXT NOT NULL,
    branch       TEXT NOT NULL,
    task         TEXT NOT NULL DEFAULT '',
    driver       TEXT NOT NULL,
    dir          TEXT NOT NULL,
    state        TEXT NOT NULL,
    dirty        INTEGER NOT NULL DEFAULT 0,
    size_bytes   BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX workspaces_repo ON workspaces(repo_id);
CREATE INDEX workspaces_pristine ON workspaces(pristine_id);
CREATE INDEX workspaces_task ON workspaces(task);

CREATE TABLE events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            BIGINT NOT NULL,
    actor         TEXT NOT NULL,
    type          TEXT NOT NULL,
    repo_id       TEXT NOT NULL DEFAULT '',
    workspace_id  TEXT NOT NULL DEFAULT '',
    sandbox_id    TEXT NOT NULL DEFAULT '',
    detail        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_workspace ON events(workspace_id, id);
CREATE INDEX events_repo ON events(repo_id, id);
CREATE INDEX events_sandbox ON events(sandbox_id, id);

-- +goose Down
DROP TABLE events;
DROP TABLE workspaces;
DROP TABLE pristines;
DROP TABLE repos;
