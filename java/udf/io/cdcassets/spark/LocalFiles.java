package io.cdcassets.spark;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * The {@code file:} file system of a local driver (the embedded stack's warehouse), for {@code
 * fs.file.impl}.
 *
 * <p>Without Hadoop's native library, Hadoop's local file system sets the permissions of every
 * file it creates by starting a {@code chmod} process, and writes a {@code .crc} file beside each
 * file (another process). An Iceberg commit creates several files (data, manifests, manifest
 * list, metadata), so a small table's commit started a few dozen processes. This one sets the
 * same permissions through {@code java.nio} and writes no {@code .crc} files: Parquet and Avro
 * files carry their own structure checks, and a checksum file already beside a file is still
 * verified on read.
 */
public final class LocalFiles extends LocalFileSystem {
  public LocalFiles() {
    super(new Raw());
    setWriteChecksum(false);
  }

  /** Hadoop's raw local file system, with permissions set in this process. */
  static final class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      short mode = permission.toShort();
      if ((mode & ~0777) != 0) {
        super.setPermission(p, permission); // sticky and set-id bits: Hadoop's own way
        return;
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(mode));
    }
  }

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE,
    PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.GROUP_WRITE,
    PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE,
    PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_READ,
  };

  /** The rwx bits of a mode. */
  static Set<PosixFilePermission> posix(short mode) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (1 << i)) != 0) {
        set.add(BITS[i]);
      }
    }
    return set;
  }
}
