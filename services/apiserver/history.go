package apiserver

import (
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// historyService implements tetherv1.HistoryServiceServer: answers computed
// from the event stream, not from the views. ListEvents, GetStateAt and
// Explain are in this file; WatchEvents in watch.go.
type historyService struct {
	tetherv1.UnimplementedHistoryServiceServer
	s *Server
}
