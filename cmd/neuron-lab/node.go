package main

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/lab/realnode"
)

// nodeInitCommand is the first process of a real lab node: the lab starts it in the node's new
// namespaces with the pipe on which it says the network is attached as file descriptor 3.
func nodeInitCommand() *cobra.Command {
	var config string
	cmd := &cobra.Command{Use: "node-init", Short: "Run a real lab node's init (the lab starts it; docs/lab.md)", Args: cobra.NoArgs, Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return realnode.RunInit(ctx, config, 3)
		}}
	cmd.Flags().StringVar(&config, "config", "", "the node's configuration file (config.json in its directory)")
	return cmd
}
