#include "runtime/base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace xrt {

namespace {

// An open descriptor of a regular file, and its size.
struct OpenedFile {
  int fd = -1;
  size_t size = 0;
  ~OpenedFile() {
    if (fd >= 0) ::close(fd);
  }
};

Status OpenRegularFile(const std::string& path, OpenedFile* f) {
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return NotFoundError("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(f->fd, &st) != 0) {
    return UnavailableError("{}: cannot stat: {}", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("{}: not a regular file", path);
  f->size = static_cast<size_t>(st.st_size);
  return Status::Ok();
}

size_t RoundUpToHugePages(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

// Reads bytes [begin, end) of the file open as `fd` (of `size` bytes) into
// dst + begin.
Status ReadRange(int fd, const std::string& path, size_t size, size_t begin, size_t end,
                 uint8_t* dst) {
  for (size_t done = begin; done < end;) {
    const ssize_t got = ::pread(fd, dst + done, end - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return UnavailableError("{}: read at byte {} failed: {}", path, done, std::strerror(errno));
    }
    if (got == 0) {
      return DataLossError("{}: the file ended at byte {} while {} were expected", path, done,
                           size);
    }
    done += static_cast<size_t>(got);
  }
  return Status::Ok();
}

}  // namespace

Expected<AnonymousMapping> AnonymousMapping::Create(size_t bytes) {
  AnonymousMapping m;
  if (bytes == 0) return m;
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) {
    return ResourceExhaustedError("cannot map {} bytes of anonymous memory", bytes);
  }
  // Over-map by a huge page, then trim the head and tail so that what remains
  // starts and ends on huge-page boundaries.
  const size_t mapped = RoundUpToHugePages(bytes);
  const size_t over = mapped + kHugePageBytes;
  void* p = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhaustedError("cannot map {} bytes of anonymous memory: {}", bytes,
                                  std::strerror(errno));
  }
  uint8_t* base = static_cast<uint8_t*>(p);
  const size_t head =
      (kHugePageBytes - reinterpret_cast<uintptr_t>(base) % kHugePageBytes) % kHugePageBytes;
  if (head > 0) ::munmap(base, head);
  ::munmap(base + head + mapped, kHugePageBytes - head);
  m.data_ = base + head;
  m.size_ = bytes;
  m.mapped_ = mapped;
  // Advice, not a requirement: with transparent huge pages off, or none free,
  // the memory is small pages and everything still works.
  (void)::madvise(m.data_, m.mapped_, MADV_HUGEPAGE);
  return m;
}

AnonymousMapping::AnonymousMapping(AnonymousMapping&& other) noexcept { *this = std::move(other); }

AnonymousMapping& AnonymousMapping::operator=(AnonymousMapping&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

AnonymousMapping::~AnonymousMapping() {
  if (data_) ::munmap(data_, mapped_);
}

Status AnonymousMapping::MakeReadOnly() {
  if (data_ && ::mprotect(data_, mapped_, PROT_READ) != 0) {
    return UnavailableError("cannot make {} bytes read-only: {}", mapped_, std::strerror(errno));
  }
  return Status::Ok();
}

size_t AnonymousMapping::HugePageBytes() const {
  if (!data_) return 0;
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (!f) return 0;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(data_), hi = lo + mapped_;
  bool inside = false;
  size_t bytes = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    uintptr_t start = 0, end = 0;
    unsigned long long kib = 0;
    // An entry's first line is "start-end perms ...", the others "Field: value".
    // The mapping may be split into several entries, or merged into one with a
    // neighbour advised alike (whose huge pages then count too, up to size_).
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &start, &end) == 2) {
      inside = start < hi && end > lo;
    } else if (inside && std::sscanf(line, "AnonHugePages: %llu kB", &kib) == 1) {
      bytes += static_cast<size_t>(kib) * 1024;
    }
  }
  std::fclose(f);
  return std::min(bytes, size_);  // not the padding after size_
}

Expected<MappedFile> MappedFile::Open(const std::string& path) {
  OpenedFile file;
  XRT_RETURN_IF_ERROR(OpenRegularFile(path, &file));
  MappedFile f;
  f.path_ = path;
  f.size_ = file.size;
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (p == MAP_FAILED) {
      return UnavailableError("{}: mmap of {} bytes failed: {}", path, f.size_,
                              std::strerror(errno));
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  return f;
}

Expected<MappedFile> MappedFile::Read(const std::string& path) {
  OpenedFile file;
  XRT_RETURN_IF_ERROR(OpenRegularFile(path, &file));
  auto copy = AnonymousMapping::Create(file.size);
  if (!copy.ok()) return copy.status().WithContext(path);
  // Pieces of kPiece bytes, taken in order by up to kMaxReaders threads: the
  // time goes into faulting in the copy's fresh pages (zeroing them; under a
  // hypervisor, the host backing them: 772 MiB took 2.0-2.2 s on one thread of
  // the AMX VM and 0.9-1.1 s on two) and copying out of the page cache, and
  // both scale with the cores.
  (void)::posix_fadvise(file.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr size_t kPiece = size_t{32} << 20;
  constexpr unsigned kMaxReaders = 8;
  const size_t pieces = (file.size + kPiece - 1) / kPiece;
  const unsigned readers = static_cast<unsigned>(
      std::min<size_t>({pieces, kMaxReaders, std::max(1u, std::thread::hardware_concurrency())}));
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first_error = Status::Ok();
  auto read_pieces = [&] {
    for (size_t i = next++; i < pieces; i = next++) {
      const size_t begin = i * kPiece, end = std::min(file.size, begin + kPiece);
      Status s = ReadRange(file.fd, path, file.size, begin, end, copy->data());
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = std::move(s);
        next = pieces;  // the others stop after their current piece
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < readers; ++t) {
    try {
      threads.emplace_back(read_pieces);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: fewer readers take the pieces
    }
  }
  read_pieces();
  for (std::thread& t : threads) t.join();
  XRT_RETURN_IF_ERROR(first_error);
  XRT_RETURN_IF_ERROR(copy->MakeReadOnly().WithContext(path));
  MappedFile f;
  f.path_ = path;
  f.size_ = file.size;
  f.copy_ = std::move(*copy);
  f.data_ = f.copy_.data();
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ && !copy_.data()) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    copy_ = std::move(other.copy_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ && !copy_.data()) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace xrt
