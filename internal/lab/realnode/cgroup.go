package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupPrefix is the cgroup under which every lab keeps its real nodes' cgroups:
// /kube-neuron-lab/<lab>-<pid>/<node> in every hierarchy, where pid is the lab's process.
const CgroupPrefix = "/kube-neuron-lab"

// RemoveStaleCgroups removes the cgroups of every lab whose process (the pid that ends the
// lab's name) is gone, and CgroupPrefix once no lab uses it.
func RemoveStaleCgroups(timeout time.Duration) error {
	hier, err := hierarchies()
	if err != nil {
		return err
	}
	stale := map[string]bool{}
	for _, h := range hier {
		entries, _ := os.ReadDir(filepath.Join(h, CgroupPrefix))
		for _, e := range entries {
			i := strings.LastIndexByte(e.Name(), '-')
			pid, err := strconv.Atoi(e.Name()[i+1:])
			if !e.IsDir() || i < 0 || err != nil {
				continue
			}
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
				stale[e.Name()] = true
			}
		}
	}
	var errs []error
	for name := range stale {
		errs = append(errs, RemoveCgroups(CgroupPrefix+"/"+name, timeout))
	}
	RemoveEmptyPrefix()
	return errors.Join(errs...)
}

// CreateCgroups creates root and root/system in every cgroup hierarchy (the kubelet's
// cgroupRoot must exist in each). In the cpuset hierarchy a new cgroup has no CPUs and no memory
// nodes until they are copied from its parent.
func CreateCgroups(root string) error {
	hier, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hier {
		rel := strings.Trim(root, "/") + "/system"
		dir := h
		for part := range strings.SplitSeq(rel, "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					continue // not the cpuset hierarchy
				}
				cur, _ := os.ReadFile(filepath.Join(dir, f))
				if strings.TrimSpace(string(cur)) != "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("copy %s into %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// RemoveCgroups ends every process in root's cgroups (in every hierarchy) and removes them,
// deepest first. A node whose init was killed leaves its cgroups; the lab removes them when the
// node stops and when a lab starts.
func RemoveCgroups(root string, timeout time.Duration) error {
	root = "/" + strings.Trim(root, "/")
	if root == "/" {
		return errors.New("refusing to remove the root cgroup")
	}
	hier, err := hierarchies()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, h := range hier {
			top := filepath.Join(h, root)
			var dirs []string
			_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) }) // deepest first
			for _, d := range dirs {
				killAll(d)
				if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups still in use after %v: %s (see which processes: cat <dir>/cgroup.procs)", timeout, strings.Join(left, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RemoveEmptyPrefix removes CgroupPrefix in every hierarchy where no lab uses it any more.
func RemoveEmptyPrefix() {
	hier, err := hierarchies()
	if err != nil {
		return
	}
	for _, h := range hier {
		_ = unix.Rmdir(filepath.Join(h, CgroupPrefix))
	}
}

// killAll sends SIGKILL to every process of one cgroup.
func killAll(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// LeftoverCgroups lists the cgroups under CgroupPrefix in any hierarchy (a test of the lab's
// cleanup checks it is empty).
func LeftoverCgroups() ([]string, error) {
	hier, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hier {
		p := filepath.Join(h, CgroupPrefix)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}
