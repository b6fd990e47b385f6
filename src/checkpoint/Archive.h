#pragma once
// torch::serialize archives written straight into checkpoint files, and read back from their bytes.
//
//   DurableWriter w(tmp + "/model.pt");
//   serialize(w, [&](torch::serialize::OutputArchive& a) { a.write("weight", tensor); });
//   w.commit();
//   deserialize(bytes, dir + "/model.pt", [&](torch::serialize::InputArchive& a) { a.read("weight", tensor); });
#include <functional>
#include <string>

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}

namespace shadowgrad::checkpoint {

class DurableWriter;

// Streams the archive into `out` as the zip writer produces it: no in-memory copy of the file.
void serialize(DurableWriter& out, const std::function<void(torch::serialize::OutputArchive&)>& fill);

// Opens `bytes`, the contents of checkpoint file `path`, as an archive and runs `read` on it. A file can pass its
// manifest's CRC and still be damaged (a checkpoint re-signed after its payload was changed): whatever LibTorch
// throws while opening or reading it (a zip it cannot parse, a bad pickle, a missing record, a tensor out of its
// storage's bounds) becomes a CorruptCheckpointError naming `path`, with LibTorch's first line made printable.
// InputErrors that `read` throws itself pass through unchanged.
void deserialize(const std::string& bytes, const std::string& path,
                 const std::function<void(torch::serialize::InputArchive&)>& read);

} // namespace shadowgrad::checkpoint
