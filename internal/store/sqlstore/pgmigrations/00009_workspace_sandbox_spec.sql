-- +goose Up
-- The sandbox spec last asked for on a workspace (JSON; empty: none), so that an exec
-- that has to start a sandbox uses it, or fails with the reason, rather than another
-- backend's default after a refused create.
ALTER TABLE workspaces ADD COLUMN sandbox_spec TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE workspaces DROP COLUMN sandbox_spec;
