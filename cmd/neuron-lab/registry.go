package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/lab/registry"
)

// registryCommand serves the lab's images to real nodes; the lab runs it inside its network
// namespace (docs/lab.md, "Images").
func registryCommand() *cobra.Command {
	var listen, fallback string
	var images []string
	cmd := &cobra.Command{Use: "registry", Short: "Serve image archives over the registry API (the lab runs it for real nodes)", Args: cobra.NoArgs, Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var imgs []registry.Image
			for _, v := range images {
				repo, archive, ok := strings.Cut(v, "=")
				if !ok {
					return fmt.Errorf("--image %q: want REPOSITORY=ARCHIVE", v)
				}
				imgs = append(imgs, registry.Image{Repository: repo, Archive: archive})
			}
			r, err := registry.New(imgs, fallback)
			if err != nil {
				return err
			}
			defer r.Close()
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			klog.FromContext(ctx).Info("Serving images", "address", l.Addr().String(), "images", len(imgs), "fallback", fallback)
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:5000", "address to serve on")
	cmd.Flags().StringArrayVar(&images, "image", nil, "REPOSITORY=ARCHIVE: an OCI layout archive served as that repository (repeatable)")
	cmd.Flags().StringVar(&fallback, "fallback", "", "archive served for every other repository (the stand-in workload)")
	return cmd
}
