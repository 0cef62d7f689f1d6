package extender

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

func TestNextMove(t *testing.T) {
	lease := func(holder string, annotations map[string]string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		l.Annotations = annotations
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		return l
	}
	asked := func(by string) map[string]string { return map[string]string{handoverAnnotation: by} }
	releasedFor := func(to string) map[string]string { return map[string]string{releasedForAnnotation: to} }
	for _, tc := range []struct {
		name      string
		lease     *coordinationv1.Lease
		held      bool
		unchanged time.Duration
		want      leaseMove
	}{
		{"held: renew", lease("me", nil), true, 0, renewLease},
		{"held, asked by me: renew", lease("me", asked("me")), true, 0, renewLease},
		{"held, asked by another: yield", lease("me", asked("other")), true, 0, yieldLease},
		{"free: take", lease("", nil), false, 0, takeLease},
		{"mine without a hold: take", lease("me", nil), false, 0, takeLease},
		{"released for me: take", lease("", releasedFor("me")), false, 0, takeLease},
		{"released for another a moment ago: leave", lease("", releasedFor("other")), false, yieldWindow, leaveLease},
		{"released for another, not taken: take", lease("", releasedFor("other")), false, yieldWindow + time.Millisecond, takeLease},
		{"another's: ask", lease("other", nil), false, 0, askForLease},
		{"another's, asked by a third: ask", lease("other", asked("third")), false, 0, askForLease},
		{"another's, asked: await", lease("other", asked("me")), false, leaseDuration, awaitLease},
		{"another's, silent for its duration: take", lease("other", asked("me")), false, leaseDuration + time.Millisecond, takeLease},
		{"another's with a shorter duration, silent for it: take", func() *coordinationv1.Lease {
			l := lease("other", nil)
			l.Spec.LeaseDurationSeconds = ptr.To(int32(2))
			return l
		}(), false, 3 * time.Second, takeLease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextMove("me", tc.lease, tc.held, tc.unchanged); got != tc.want {
				t.Errorf("nextMove = %d, want %d", got, tc.want)
			}
		})
	}
}
