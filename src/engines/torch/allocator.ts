/**
 * First-fit free-list allocator over a byte range, every block aligned to 64 bytes. It only does
 * book-keeping: the bytes themselves live in an arena file. Blocks are coalesced on free.
 */

export const ALIGNMENT = 64;

export function alignUp(n: number): number {
  return Math.ceil(n / ALIGNMENT) * ALIGNMENT;
}

interface Block {
  offset: number;
  size: number;
}

export class FirstFitAllocator {
  private free: Block[];
  private readonly used = new Map<number, number>();

  constructor(private capacityBytes: number) {
    this.free = [{ offset: 0, size: capacityBytes }];
  }

  get capacity(): number {
    return this.capacityBytes;
  }

  get usedBytes(): number {
    let total = 0;
    for (const size of this.used.values()) total += size;
    return total;
  }

  /** Returns the offset of a block of at least `bytes`, or undefined when no free block fits. */
  allocate(bytes: number): number | undefined {
    const size = alignUp(Math.max(bytes, 1));
    const index = this.free.findIndex((b) => b.size >= size);
    if (index < 0) return undefined;
    const block = this.free[index] as Block;
    const offset = block.offset;
    if (block.size === size) this.free.splice(index, 1);
    else this.free[index] = { offset: offset + size, size: block.size - size };
    this.used.set(offset, size);
    return offset;
  }

  release(offset: number): void {
    const size = this.used.get(offset);
    if (size === undefined) return;
    this.used.delete(offset);
    let index = this.free.findIndex((b) => b.offset > offset);
    if (index < 0) index = this.free.length;
    this.free.splice(index, 0, { offset, size });
    this.coalesce();
  }

  /** Extends the range (the file grew); the new tail becomes free space. */
  grow(newCapacity: number): void {
    if (newCapacity <= this.capacityBytes) return;
    this.free.push({ offset: this.capacityBytes, size: newCapacity - this.capacityBytes });
    this.capacityBytes = newCapacity;
    this.coalesce();
  }

  private coalesce(): void {
    const merged: Block[] = [];
    for (const block of this.free) {
      const last = merged[merged.length - 1];
      if (last && last.offset + last.size === block.offset) last.size += block.size;
      else merged.push({ ...block });
    }
    this.free = merged;
  }
}
