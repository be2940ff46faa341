/**
 * Which CPUs a torch worker runs on (`resources.cpus`). A worker's forward pass is short next to
 * the time between calls, and whatever else runs on its core in between (the gateway, a client,
 * another model's worker) takes the caches it needs; a core of its own keeps them. On the
 * development VM a forward pass of the tabular model took 0.10 ms on a core shared with the
 * gateway and the client and 0.06 ms on its own, though the call as a whole was slower there: the
 * gateway and the client were left one core to share (docs/architecture.md#cpu-placement).
 */

/**
 * The CPUs instance `index` of `instances` runs on. With a CPU for each instance at least, the
 * list is cut into as many runs as there are instances, in order and as even as they come (5 CPUs
 * for 2 instances: 3 and 2), so that instances do not take turns on a core; with fewer, every
 * instance gets the whole list and the operating system shares it out.
 */
export function instanceCpus(cpus: readonly number[], instances: number, index: number): number[] {
  if (instances <= 1 || cpus.length < instances) return [...cpus];
  const base = Math.floor(cpus.length / instances);
  const extra = cpus.length % instances;
  const start = index * base + Math.min(index, extra);
  return cpus.slice(start, start + base + (index < extra ? 1 : 0));
}
