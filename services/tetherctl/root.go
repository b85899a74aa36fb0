package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// cli holds the global flags and the API connection.
type cli struct {
	out     io.Writer
	addr    string
	output  string
	timeout time.Duration

	conn *grpc.ClientConn
}

func newRoot(out io.Writer) *cobra.Command {
	c := &cli{out: out}
	root := &cobra.Command{
		Use:           "tetherctl",
		Short:         "Operate Tether: fleets, game servers and hosts",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch c.output {
			case "table", "json", "yaml":
				return nil
			}
			return fmt.Errorf("--output must be table, json or yaml, not %q", c.output)
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			if c.conn != nil {
				return c.conn.Close()
			}
			return nil
		},
	}
	root.SetOut(out)
	addr := os.Getenv("TETHER_ADDR")
	if addr == "" {
		addr = "127.0.0.1:7070"
	}
	f := root.PersistentFlags()
	f.StringVar(&c.addr, "addr", addr, "API gRPC address (env TETHER_ADDR)")
	f.StringVarP(&c.output, "output", "o", "table", "table, json or yaml")
	f.DurationVar(&c.timeout, "timeout", 10*time.Second, "per-request timeout")
	root.AddCommand(c.fleetsCommand(), c.gameServersCommand(), c.hostsCommand())
	return root
}

func (c *cli) dial() (*grpc.ClientConn, error) {
	if c.conn != nil {
		return c.conn, nil
	}
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.addr, err)
	}
	c.conn = conn
	return conn, nil
}

func (c *cli) fleets() (tetherv1.FleetServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return tetherv1.NewFleetServiceClient(conn), nil
}

func (c *cli) gameServers() (tetherv1.GameServerServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return tetherv1.NewGameServerServiceClient(conn), nil
}

func (c *cli) hosts() (tetherv1.HostServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return tetherv1.NewHostServiceClient(conn), nil
}

// call bounds one request by --timeout.
func (c *cli) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// describe renders an API error readably: message, reason and field.
func describe(err error) string {
	st, ok := status.FromError(errors.Unwrap(err))
	if !ok {
		if st, ok = status.FromError(err); !ok {
			return err.Error()
		}
	}
	msg := st.Message()
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			msg += " (" + d.GetReason() + ")"
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				msg += "\n  field " + v.GetField() + ": " + v.GetDescription()
			}
		}
	}
	return msg
}
