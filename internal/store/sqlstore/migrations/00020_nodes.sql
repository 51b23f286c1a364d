-- +goose Up
-- The daemons (nodes) sharing this store: each registers at start, records
-- a heartbeat while it runs and its stop when it stops cleanly, so that
-- the others can tell a live node from a lost one.
CREATE TABLE nodes (
    id            TEXT PRIMARY KEY,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    data_dir      TEXT NOT NULL,
    addr          TEXT NOT NULL DEFAULT '',
    version       TEXT NOT NULL DEFAULT '',
    started_at    BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL,
    stopped_at    BIGINT NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE nodes;
