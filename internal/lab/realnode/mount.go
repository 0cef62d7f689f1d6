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

	"golang.org/x/sys/unix"
)

// setupMounts gives the node its own file system view. It runs in the node init, in the node's
// new mount namespace, and changes nothing the host sees:
//   - / becomes a private tree (no mount event reaches the host);
//   - /proc of the node's PID namespace; /run, an empty tmpfs (the host's /tmp stays: the lab's
//     own directory may be there; the daemons' TMPDIR is the node's);
//   - /var and /opt, the node's directories (Dir/var, Dir/opt): the kubelet's root, containerd's,
//     CNI's state, logs and every hostPath the chart creates stay in the lab's directory;
//     /var is a shared mount so the kubelet's mount propagation works;
//   - /sys, a sysfs of the node's network namespace with the host's cgroup hierarchies and the
//     simulated Neuron tree merged in (mergeSysfs);
//   - /dev, a tmpfs with the host's device nodes, its own devpts and /dev/neuron0..N-1;
//   - with Config.CPUs and MemoryBytes, the instance type's size in /sys/devices/system and
//     /proc/meminfo;
//   - /opt/aws/neuron, the simulated tree's (logical_nc_config).
func setupMounts(c Config) error {
	if err := checkPaths(c); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on /run: %w", err)
	}
	if err := prepareVar(filepath.Join(c.Dir, "var")); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "opt", "aws", "neuron"), 0o755); err != nil {
		return err
	}
	for _, b := range []struct{ src, dst string }{
		{filepath.Join(c.Dir, "var"), "/var"},
		{filepath.Join(c.Dir, "opt"), "/opt"},
	} {
		if err := unix.Mount(b.src, b.dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", b.src, b.dst, err)
		}
	}
	if err := unix.Mount("", "/var", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make /var shared: %w", err)
	}
	if c.Sysfs != "" {
		src := filepath.Join(c.Sysfs, "opt", "aws", "neuron")
		if _, err := os.Stat(src); err == nil {
			if err := unix.Mount(src, "/opt/aws/neuron", "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind %s on /opt/aws/neuron: %w", src, err)
			}
		}
	}
	if err := mountSysfs(c.Sysfs, c.CPUs); err != nil {
		return err
	}
	if c.MemoryBytes > 0 {
		if err := mountMeminfo(c.MemoryBytes); err != nil {
			return err
		}
	}
	return mountDev(c.Devices)
}

// hiddenDirs are the directories a node mounts its own over.
var hiddenDirs = []string{"/var", "/opt", "/run", "/dev", "/sys", "/proc"}

// checkPaths refuses a configuration whose files the node's own mounts would hide.
func checkPaths(c Config) error {
	paths := []string{c.Dir, c.LogDir, c.Sysfs, c.Containerd, c.Kubelet, c.KubeProxy, c.ContainerdConfig}
	for _, p := range paths {
		for _, h := range hiddenDirs {
			if p != "" && (p == h || strings.HasPrefix(p, h+"/")) {
				return fmt.Errorf("%s is under %s, which a real node mounts its own over: keep the lab's directory and binaries elsewhere (the repository, /tmp or $HOME)", p, h)
			}
		}
	}
	return nil
}

// prepareVar makes the node's /var: the directories and links a Debian /var has that the
// node's programs use.
func prepareVar(dir string) error {
	for _, d := range []string{"lib/kubelet", "lib/containerd", "lib/cni", "log", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"run": "/run", "lock": "/run/lock"} {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(target, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// The sysfs directories the simulated Neuron tree adds to (sysfs.go of internal/neuron reads
// them).
var sysfsMerges = []string{"devices/virtual", "class", "module", "bus/pci/devices"}

// mountSysfs mounts a sysfs of the node's network namespace on /sys (so /sys/class/net shows
// the node's interfaces), binds the host's cgroup hierarchies into it, merges the simulated
// tree's entries into sysfsMerges and, with cpus > 0, shows that many CPUs in
// /sys/devices/system (machineTree).
func mountSysfs(sim string, cpus int) error {
	stage := "/run/kube-neuron-lab/sys"
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("sysfs", stage, "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount sysfs: %w", err)
	}
	if err := mountCgroups(filepath.Join(stage, "fs", "cgroup")); err != nil {
		return err
	}
	var merges []struct{ rel, src string }
	if sim != "" {
		for _, rel := range sysfsMerges {
			merges = append(merges, struct{ rel, src string }{rel, filepath.Join(sim, "sys", rel)})
		}
	}
	if cpus > 0 {
		machine := "/run/kube-neuron-lab/machine"
		if err := machineTree(machine, stage, cpus); err != nil {
			return fmt.Errorf("the node's CPUs: %w", err)
		}
		for _, rel := range []string{"devices/system/cpu", "devices/system/node/node0"} {
			merges = append(merges, struct{ rel, src string }{rel, filepath.Join(machine, rel)})
		}
	}
	for i, m := range merges {
		if _, err := os.Stat(m.src); err != nil {
			continue
		}
		tmp := filepath.Join("/run/kube-neuron-lab/merge", strconv.Itoa(i))
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", tmp, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mount a tmpfs to merge /sys/%s: %w", m.rel, err)
		}
		target := filepath.Join(stage, m.rel)
		if err := merge(tmp, target, m.src); err != nil {
			return fmt.Errorf("merge into /sys/%s: %w", m.rel, err)
		}
		if err := unix.Mount(tmp, target, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move the merged /sys/%s into place: %w", m.rel, err)
		}
	}
	if err := unix.Mount(stage, "/sys", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the node's sysfs onto /sys: %w", err)
	}
	return nil
}

// mountCgroups mounts at dir every cgroup hierarchy the host has, mounted again from inside the
// node's cgroup namespace: each shows the node's cgroup as its root.
func mountCgroups(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("mount a tmpfs for the cgroup hierarchies: %w", err)
	}
	n := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || !strings.HasPrefix(f[4], "/sys/fs/cgroup/") {
			continue
		}
		target := filepath.Join(dir, strings.TrimPrefix(f[4], "/sys/fs/cgroup/"))
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		var opts []string
		for _, o := range strings.Split(g[2], ",") {
			if o != "rw" && o != "ro" {
				opts = append(opts, o)
			}
		}
		if err := unix.Mount(g[1], target, g[0], unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, strings.Join(opts, ",")); err != nil {
			return fmt.Errorf("mount the %s cgroup hierarchy (%s) in the node: %w", g[0], strings.Join(opts, ","), err)
		}
		n++
	}
	if n == 0 {
		return ErrNoCgroups
	}
	return nil
}

// machineTree writes under dir the sysfs entries of a machine of cpus CPUs that the host lacks:
// devices/system/cpu/cpuN/topology (one core per CPU, one package) for the CPUs beyond the
// host's, the online, possible and present lists, and node0's links to them. The kubelet reads
// its CPU capacity from there (cAdvisor's topology).
func machineTree(dir, sysfs string, cpus int) error {
	cpuDir := filepath.Join(dir, "devices", "system", "cpu")
	nodeDir := filepath.Join(dir, "devices", "system", "node", "node0")
	for _, d := range []string{cpuDir, nodeDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for i := range cpus {
		name := "cpu" + strconv.Itoa(i)
		if _, err := os.Stat(filepath.Join(sysfs, "devices", "system", "cpu", name)); err == nil {
			continue // the host's own
		}
		topo := filepath.Join(cpuDir, name, "topology")
		if err := os.MkdirAll(topo, 0o755); err != nil {
			return err
		}
		for f, v := range map[string]string{"core_id": strconv.Itoa(i), "physical_package_id": "0", "thread_siblings_list": strconv.Itoa(i), "core_siblings_list": fmt.Sprintf("0-%d", cpus-1)} {
			if err := os.WriteFile(filepath.Join(topo, f), []byte(v+"\n"), 0o444); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(cpuDir, name, "online"), []byte("1\n"), 0o444); err != nil {
			return err
		}
		if err := os.Symlink("../../cpu/"+name, filepath.Join(nodeDir, name)); err != nil {
			return err
		}
	}
	all := fmt.Sprintf("0-%d\n", cpus-1)
	for _, f := range []string{"online", "possible", "present"} {
		if err := os.WriteFile(filepath.Join(cpuDir, f), []byte(all), 0o444); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(nodeDir, "cpulist"), []byte(all), 0o444)
}

// mountMeminfo shows a MemTotal of bytes in the node's /proc/meminfo (the kubelet's memory
// capacity); the other lines stay the host's.
func mountMeminfo(bytes uint64) error {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return err
	}
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(string(data), "\n"), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			line = fmt.Sprintf("MemTotal:       %d kB", bytes/1024)
		}
		b.WriteString(line + "\n")
	}
	path := "/run/kube-neuron-lab/meminfo"
	if err := os.WriteFile(path, []byte(b.String()), 0o444); err != nil {
		return err
	}
	if err := unix.Mount(path, "/proc/meminfo", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the node's meminfo: %w", err)
	}
	return nil
}

// merge fills the empty directory stage with the entries of real and sim (sim wins on a file;
// directories in both are merged recursively): symlinks are copied, other entries bound.
func merge(stage, real, sim string) error {
	realEntries, err := os.ReadDir(real)
	if err != nil {
		return err
	}
	simEntries, err := os.ReadDir(sim)
	if err != nil {
		return err
	}
	simByName := map[string]fs.DirEntry{}
	for _, e := range simEntries {
		simByName[e.Name()] = e
	}
	for _, e := range realEntries {
		s, both := simByName[e.Name()]
		if both && e.IsDir() && s.IsDir() {
			dir := filepath.Join(stage, e.Name())
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			if err := merge(dir, filepath.Join(real, e.Name()), filepath.Join(sim, e.Name())); err != nil {
				return err
			}
			delete(simByName, e.Name())
			continue
		}
		if both {
			continue // the simulated entry replaces it below
		}
		if err := place(filepath.Join(stage, e.Name()), filepath.Join(real, e.Name())); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(simByName))
	for n := range simByName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := place(filepath.Join(stage, n), filepath.Join(sim, n)); err != nil {
			return err
		}
	}
	return nil
}

// place makes dst show src: a copy of a symlink, or a bind mount on an empty directory or file.
func place(dst, src string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if fi.IsDir() {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	} else if err := os.WriteFile(dst, nil, 0o444); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}

// mountDev mounts a tmpfs on /dev with the host's device nodes (made again with the same numbers
// and modes), symlinks and directories, a devpts of its own, a tmpfs /dev/shm, and the Neuron
// device nodes /dev/neuron0..n-1. These have the numbers of /dev/null: the container runtime
// needs them to exist; nothing opens them for real.
func mountDev(neuronDevices int) error {
	type node struct {
		path   string
		mode   uint32
		rdev   uint64
		target string // for a symlink
		dir    bool
	}
	var nodes []node
	err := filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an entry that went away
		}
		if p == "/dev" {
			return nil
		}
		if p == "/dev/pts" || p == "/dev/shm" || p == "/dev/mqueue" || p == "/dev/hugepages" {
			return fs.SkipDir
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil
		}
		n := node{path: p, mode: st.Mode, rdev: st.Rdev}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n.dir = true
		case unix.S_IFLNK:
			if n.target, err = os.Readlink(p); err != nil {
				return nil
			}
		case unix.S_IFCHR, unix.S_IFBLK:
		default:
			return nil // sockets, fifos, files: nothing a node needs
		}
		nodes = append(nodes, n)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the host's /dev: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on /dev: %w", err)
	}
	for _, n := range nodes {
		switch {
		case n.dir:
			err = os.MkdirAll(n.path, os.FileMode(n.mode&0o777))
		case n.target != "":
			err = os.Symlink(n.target, n.path)
		default:
			err = unix.Mknod(n.path, n.mode, int(n.rdev))
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("make %s: %w", n.path, err)
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	_ = os.Remove("/dev/ptmx")
	if err := os.Symlink("pts/ptmx", "/dev/ptmx"); err != nil {
		return err
	}
	if err := unix.Mount("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	for i := range neuronDevices {
		p := "/dev/neuron" + strconv.Itoa(i)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			return fmt.Errorf("make %s: %w", p, err)
		}
	}
	return nil
}
