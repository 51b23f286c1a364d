-- +goose Up
-- Candidates: a workspace's result up for review. The record is one JSON
-- document; the columns are what is looked up or guarded (the
-- disposition, which a decision changes only from what it was).
CREATE TABLE candidates (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL,
    disposition   TEXT NOT NULL,
    doc           TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX candidates_workspace ON candidates (workspace_id, created_at);

-- How the daemon reaches a forge host: its API kind and the name of the
-- stored secret with the token (never the token).
CREATE TABLE forges (
    host        TEXT PRIMARY KEY,
    doc         TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- +goose Down
DROP TABLE forges;
DROP TABLE candidates;
