# Conveniences over the scripts; the scripts are the source of truth.
.PHONY: build demo test setup bench vet
build:
	CGO_ENABLED=0 go build -o bin/agentbox ./cmd/agentbox
	CGO_ENABLED=0 go build -o bin/agentbox-guest ./cmd/agentbox-guest
demo:
	./scripts/demo.sh
test:
	./scripts/test.sh
setup:
	./scripts/setup.sh
bench: build
	./bin/agentbox bench workspace
vet:
	go vet ./...
