#pragma once
// torch::serialize archives written straight into checkpoint files.
//
//   DurableWriter w(tmp + "/model.pt");
//   serialize(w, [&](torch::serialize::OutputArchive& a) { a.write("weight", tensor); });
//   w.commit();
#include <functional>

namespace torch::serialize {
class OutputArchive;
}

namespace shadowgrad::checkpoint {

class DurableWriter;

// Streams the archive into `out` as the zip writer produces it: no in-memory copy of the file.
void serialize(DurableWriter& out, const std::function<void(torch::serialize::OutputArchive&)>& fill);

} // namespace shadowgrad::checkpoint
