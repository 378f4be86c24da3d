// `attnkit convert-gqa`: turns an MHA (or GQA) Llama-named checkpoint into one with fewer KV heads
// by pooling the K/V projections of each group of contiguous heads (mean, first or random head).
#include <cstdio>
#include <memory>

#include "attnkit/tools/convert_gqa.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct ConvertCli {
  std::string in, out, method = "mean";
  ConvertGqaOptions opts;
};

}  // namespace

void add_convert_gqa_command(CLI::App& app) {
  auto cli = std::make_shared<ConvertCli>();
  auto* c = app.add_subcommand("convert-gqa",
                               "Convert a checkpoint to N KV heads by pooling K/V projections per group of heads");
  c->add_option("--in", cli->in, "Input model directory (config.json + model.safetensors)")->required();
  c->add_option("--out", cli->out, "Output directory (new or empty; never --in or inside it)")->required();
  c->add_option("--kv-heads", cli->opts.kv_heads, "New number of KV heads N (must divide the current one)")
      ->required()->check(integer_in(1));
  c->add_option("--method", cli->method, "mean | first | random (one head of each group)")->capture_default_str();
  add_seed_flag(*c, cli->opts.seed, "Seed of --method random");
  c->callback([cli] {
    require_model_dir(cli->in, "--in", ModelKind::kGpt, "convert-gqa");
    ConvertGqaOptions o = cli->opts;
    o.method = parse_gqa_pool_method(cli->method);
    convert_gqa(cli->in, cli->out, o);
    std::printf("wrote %s with %lld KV heads (%s)\n", cli->out.c_str(), (long long)o.kv_heads, cli->method.c_str());
  });
}

}  // namespace attnkit::cli
