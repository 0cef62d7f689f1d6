package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaseName is the leader election Lease: only its holder plans and launches.
const LeaseName = "neuron-autoscaler"

// Run serves the metrics and, as the leader when LeaderElect is set, runs the loop until ctx
// ends. Losing the Lease is an error: the process should exit and rejoin the election.
func (c *Controller) Run(ctx context.Context) error {
	if c.o.MetricsAddress != "" {
		if err := c.serve(ctx); err != nil {
			return err
		}
	}
	if !c.o.LeaderElect {
		c.leading.Store(true)
		return c.run(ctx)
	}
	return c.runElected(ctx)
}

func (c *Controller) serve(ctx context.Context) error {
	lis, err := net.Listen("tcp", c.o.MetricsAddress)
	if err != nil {
		return fmt.Errorf("listening on %s for the metrics: %w", c.o.MetricsAddress, err)
	}
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving the metrics failed")
		}
	}()
	return nil
}

func (c *Controller) runElected(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.o.LeaseNamespace, Name: LeaseName},
		Client:     c.o.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.o.Identity},
	}
	var (
		mu               sync.Mutex
		running, stopped bool
		runErr           error
		done             = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: LeaseName, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leCtx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				running = true
				mu.Unlock()
				defer close(done)
				logger.Info("Leading", "lease", klog.KRef(c.o.LeaseNamespace, LeaseName), "identity", c.o.Identity)
				c.leading.Store(true)
				if err := c.run(leCtx); err != nil {
					runErr = err
					cancel()
				}
			},
			OnStoppedLeading: func() { c.leading.Store(false) },
			OnNewLeader: func(id string) {
				if id != c.o.Identity {
					logger.Info("Another replica leads", "lease", klog.KRef(c.o.LeaseNamespace, LeaseName), "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	mu.Lock()
	stopped = true
	wasRunning := running
	mu.Unlock()
	if wasRunning {
		<-done
	}
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		return nil
	}
	return fmt.Errorf("lost the Lease %s/%s: exiting so that a new process rejoins the election", c.o.LeaseNamespace, LeaseName)
}

// run starts the informers and runs the work loop until ctx ends.
func (c *Controller) run(ctx context.Context) error {
	factory, err := c.start(ctx)
	if factory != nil {
		defer factory.Shutdown()
	}
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	logger.Info("Autoscaler running", "provider", c.o.Provider.Name(), "batchWindow", c.o.BatchWindow, "scaleDownAfter", c.o.ScaleDownAfter,
		"maxNodes", c.o.MaxNodes, "maxDevices", c.o.MaxDevices, "families", c.o.Families, "dryRun", c.o.DryRun)
	ticker := time.NewTicker(c.resync)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-c.kick:
			// The batch: wait for the pods created together with the first one.
			timer := time.NewTimer(c.o.BatchWindow)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
			}
		}
		select {
		case <-c.kick:
		default:
		}
		if err := c.reconcile(ctx); err != nil {
			logger.Error(err, "Autoscaler round failed; retrying at the next one")
		}
	}
}
