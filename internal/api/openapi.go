package api

import (
	_ "embed"
	"net/http"
)

// openapiJSON is the API's OpenAPI 3 document; TestOpenAPIMatchesRoutes
// keeps it in step with the route table.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiJSON)
}
