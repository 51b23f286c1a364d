-- +goose Up
-- A workspace with a disk quota keeps its own files in a file system of
-- that size (see internal/workspace/volume_linux.go); 0 means none.
ALTER TABLE workspaces ADD COLUMN disk_quota BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE workspaces DROP COLUMN disk_quota;
