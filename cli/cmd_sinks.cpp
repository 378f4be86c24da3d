// `attnkit sink-profile` (where a query's attention goes, per layer and head, and gate statistics)
// and `attnkit eval-stream` (perplexity over a long text under a KV-cache policy), with --json /
// --csv and matplotlib figures (--plot).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/tools/sink_profile.hpp"
#include "attnkit/tools/stream_eval.hpp"
#include "cli_data.hpp"
#include "commands.hpp"
#include "flags.hpp"
#include "plot_scripts.hpp"

namespace attnkit::cli {
namespace {

struct ProfileCli {
  std::string model, split = "validation", json_file, plot;
  std::vector<std::string> data{"fortunes"};
  SinkProfileOptions opts;
  bool json = false, gates = false;
  int threads = 0;
};

nlohmann::json buckets_json(const SinkBuckets& b) {
  return {{"token0", b.first}, {"tokens1_3", b.next3}, {"middle", b.middle}, {"recent", b.recent},
          {"sink_logit", b.sink}};
}

nlohmann::json profile_json(const ProfileCli& cli, const SinkProfile& p) {
  const int64_t R = cli.opts.recent, bins = p.gate_bins;
  nlohmann::json j = {{"model", cli.model}, {"data", cli.data}, {"split", cli.split},
                      {"query_pos", p.query_pos}, {"windows", p.windows}, {"recent", R},
                      {"has_sink_logit", p.has_sink_logit}, {"has_gate", p.has_gate},
                      {"overall", buckets_json(p.overall_buckets(R))}};
  double gate_all = 0;
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < p.layers; ++l) {
    nlohmann::json heads = nlohmann::json::array();
    std::vector<double> mean_row(size_t(p.query_pos + 1), 0.0);
    double gate_layer = 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      nlohmann::json hj = buckets_json(p.head_buckets(l, h, R));
      hj["head"] = h;
      hj["mass"] = std::vector<double>(p.row(l, h).begin(), p.row(l, h).end());
      for (size_t k = 0; k < mean_row.size(); ++k) mean_row[k] += p.row(l, h)[k] / double(p.heads);
      if (p.has_gate) {
        const double g = p.gate_mean[size_t(l * p.heads + h)];
        gate_layer += g / double(p.heads);
        hj["gate_mean"] = g;
        hj["gate_hist"] = std::vector<double>(p.gate_hist.begin() + (l * p.heads + h) * bins,
                                              p.gate_hist.begin() + (l * p.heads + h + 1) * bins);
      }
      heads.push_back(hj);
    }
    nlohmann::json lj = buckets_json(p.layer_buckets(l, R));
    lj["layer"] = l;
    lj["mass"] = mean_row;
    lj["heads"] = heads;
    if (p.has_gate) lj["gate_mean"] = gate_layer;
    gate_all += gate_layer / double(p.layers);
    layers.push_back(lj);
  }
  j["layers"] = layers;
  const size_t n = size_t(p.query_pos + 1);
  nlohmann::json hidden = nlohmann::json::array(), keys = nlohmann::json::array();
  for (int64_t l = 0; l <= p.layers; ++l)
    hidden.push_back(std::vector<double>(p.hidden_norm.begin() + l * n, p.hidden_norm.begin() + (l + 1) * n));
  for (int64_t l = 0; l < p.layers; ++l) {
    nlohmann::json per_head = nlohmann::json::array();
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      const auto b = p.key_norm.begin() + (l * p.kv_heads + g) * n;
      per_head.push_back(std::vector<double>(b, b + n));
    }
    keys.push_back(per_head);
  }
  j["hidden_norm"] = hidden;  // [L + 1][N + 1]: row l enters layer l, row L leaves the last layer
  j["key_norm"] = keys;       // [L][Hkv][N + 1]
  j["gate_mean"] = p.has_gate ? nlohmann::json(gate_all) : nlohmann::json(nullptr);
  return j;
}

void print_row(const char* label, const SinkBuckets& b, bool sink, double gate) {
  std::printf("%-10s %8.4f %9.4f %8.4f %9.4f", label, b.first, b.next3, b.middle, b.recent);
  if (sink) std::printf(" %8.4f", b.sink);
  if (gate >= 0) std::printf(" %9.4f", gate);
  std::printf("\n");
}

void run_profile(const ProfileCli& cli) {
  require_model_dir(cli.model, "--model", ModelKind::kGpt, "sink-profile");
  if (!cli.plot.empty()) check_output_file(cli.plot, "--plot");
  ThreadCountScope threads(cli.threads);
  GptModel model = GptModel::load(cli.model);
  const std::vector<int32_t> tokens = load_split_tokens(cli.data, cli.split);
  const SinkProfile p = sink_profile(model, tokens, cli.opts);
  const nlohmann::json j = profile_json(cli, p);
  if (!cli.plot.empty()) {
    const std::string tmp = cli.plot + ".json.tmp";
    std::ofstream(tmp) << j.dump();
    try {
      run_python(kSinkProfilePlot, {tmp, cli.plot}, "--plot");
    } catch (const Error&) {
      std::filesystem::remove(tmp);
      throw;
    }
    std::filesystem::remove(tmp);
  }
  if (cli.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const int64_t R = cli.opts.recent;
  std::printf("attention of query position %lld, mean over %lld windows (%s split); rows: mass on\n"
              "token 0, tokens 1-3, the middle, the %lld most recent keys%s%s\n",
              (long long)p.query_pos, (long long)p.windows, cli.split.c_str(), (long long)R,
              p.has_sink_logit ? ", the sink logit" : "", p.has_gate ? "; mean gate activation" : "");
  std::printf("%-10s %8s %9s %8s %9s%s%s\n", "", "token0", "tokens1-3", "middle", "recent",
              p.has_sink_logit ? "     sink" : "", p.has_gate ? "  gate_mean" : "");
  for (int64_t l = 0; l < p.layers; ++l) {
    const double gl = p.has_gate ? double(j["layers"][size_t(l)]["gate_mean"]) : -1.0;
    print_row(("layer " + std::to_string(l)).c_str(), p.layer_buckets(l, R), p.has_sink_logit, gl);
    for (int64_t h = 0; h < p.heads; ++h)
      print_row(("  head " + std::to_string(h)).c_str(), p.head_buckets(l, h, R), p.has_sink_logit,
                p.has_gate ? p.gate_mean[size_t(l * p.heads + h)] : -1.0);
  }
  print_row("all", p.overall_buckets(R), p.has_sink_logit, p.has_gate ? double(j["gate_mean"]) : -1.0);
  if (cli.gates && p.has_gate) {
    std::printf("\ngate histograms (fraction of gate values per bin of width %.3g on [0, 1]):\n",
                1.0 / double(p.gate_bins));
    for (int64_t l = 0; l < p.layers; ++l)
      for (int64_t h = 0; h < p.heads; ++h) {
        std::printf("layer %lld head %lld:", (long long)l, (long long)h);
        for (int64_t b = 0; b < p.gate_bins; ++b)
          std::printf(" %.3f", p.gate_hist[size_t((l * p.heads + h) * p.gate_bins + b)]);
        std::printf("\n");
      }
  } else if (cli.gates) {
    std::printf("\n(the model has no output gate)\n");
  }
  if (!cli.plot.empty()) std::printf("figure: %s\n", cli.plot.c_str());
}

struct StreamCli {
  std::string model, policy = "sink", split = "validation", csv, plot;
  std::vector<std::string> data{"bible"};
  StreamEvalOptions opts;
  int64_t chunk = 64;
  bool json = false;
  int threads = 0;
};

void run_stream(const StreamCli& cli) {
  require_model_dir(cli.model, "--model", ModelKind::kGpt, "eval-stream");
  if (!cli.csv.empty()) check_output_file(cli.csv, "--csv");
  if (!cli.plot.empty()) check_output_file(cli.plot, "--plot");
  ThreadCountScope threads(cli.threads);
  check(cli.chunk >= 1, "--chunk: must be >= 1");
  StreamEvalOptions o = cli.opts;
  o.policy = parse_kv_policy(cli.policy, "--policy");
  GptModel model = GptModel::load(cli.model);
  check_fits_in_memory(gpt_kv_cache_bytes(model.config(), double(o.window) + double(o.sink_tokens)), "--window",
                       "a KV cache of --window + --sink-tokens tokens");
  const std::vector<int32_t> tokens = load_split_tokens(cli.data, cli.split);
  check(o.tokens <= int64_t(tokens.size()), "--tokens: the ", cli.split, " split has only ", tokens.size(),
        " tokens, asked for ", o.tokens);
  const StreamEvalResult r = stream_eval(model, tokens, o);
  const int64_t n = int64_t(r.nll.size()), ctx = model.config().max_position_embeddings;
  const int64_t W = o.window > 0 ? o.window : ctx;
  // ppl of each chunk of `chunk` consecutive predictions (the curve) and of everything so far.
  std::vector<double> chunk_ppl(static_cast<size_t>(n)), cum_ppl(static_cast<size_t>(n));
  double cum = 0, win = 0;
  for (int64_t t = 0; t < n; ++t) {
    cum += r.nll[size_t(t)];
    win += r.nll[size_t(t)] - (t >= cli.chunk ? r.nll[size_t(t - cli.chunk)] : 0.0);
    cum_ppl[size_t(t)] = std::exp(cum / double(t + 1));
    chunk_ppl[size_t(t)] = std::exp(win / double(std::min(t + 1, cli.chunk)));
  }
  const std::string csv = !cli.csv.empty() ? cli.csv : !cli.plot.empty() ? cli.plot + ".csv.tmp" : "";
  if (!csv.empty()) {
    std::ofstream out(csv);
    check(bool(out), "--csv: cannot write ", csv);
    out << "# policy=" << cli.policy << " window=" << W << " sink_tokens=" << o.sink_tokens << " context=" << ctx << "\n";
    out << "position,nll,ppl_chunk,ppl_cumulative\n";
    for (int64_t t = 0; t < n; ++t)
      out << t + 1 << "," << r.nll[size_t(t)] << "," << chunk_ppl[size_t(t)] << "," << cum_ppl[size_t(t)] << "\n";
  }
  if (!cli.plot.empty()) {
    try {
      run_python(kStreamPlot, {csv, cli.plot, std::to_string(ctx)}, "--plot");
    } catch (const Error&) {
      if (cli.csv.empty()) std::filesystem::remove(csv);
      throw;
    }
    if (cli.csv.empty()) std::filesystem::remove(csv);
  }
  // Perplexity past the training context (the part that shows the policies apart).
  double tail = 0;
  int64_t tail_n = 0;
  for (int64_t t = ctx; t < n; ++t) tail += r.nll[size_t(t)], ++tail_n;
  const double ppl = std::exp(r.mean_nll());
  const double tail_ppl = tail_n > 0 ? std::exp(tail / double(tail_n)) : NAN;
  if (cli.json) {
    nlohmann::json j = {{"policy", cli.policy}, {"window", W},
                        {"sink_tokens", o.policy == KVPolicy::sink ? o.sink_tokens : 0}, {"tokens", o.tokens},
                        {"context", ctx}, {"mean_nll", r.mean_nll()}, {"ppl", ppl},
                        {"ppl_past_context", tail_n > 0 ? nlohmann::json(tail_ppl) : nlohmann::json(nullptr)},
                        {"ppl_last_chunk", chunk_ppl.back()}, {"cache_tokens", r.cache_tokens}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("policy %s, window %lld, sink tokens %lld, %lld tokens (training context %lld)\n", cli.policy.c_str(),
              (long long)W, (long long)(o.policy == KVPolicy::sink ? o.sink_tokens : 0), (long long)o.tokens,
              (long long)ctx);
  std::printf("perplexity %.3f (mean nll %.4f nats over %lld predictions)\n", ppl, r.mean_nll(), (long long)n);
  if (tail_n > 0) std::printf("perplexity past the training context: %.3f (%lld predictions)\n", tail_ppl, (long long)tail_n);
  std::printf("perplexity of the last %lld predictions: %.3f; cache holds %lld tokens\n",
              (long long)std::min(cli.chunk, n), chunk_ppl.back(), (long long)r.cache_tokens);
}

}  // namespace

void add_sinks_commands(CLI::App& app) {
  auto p = std::make_shared<ProfileCli>();
  auto* sp = app.add_subcommand("sink-profile", "Attention mass by key position per layer and head at one query position (attention sinks), and gate statistics");
  sp->add_option("--model", p->model, "Model directory (config.json + model.safetensors)")->required();
  sp->add_option("--data", p->data, "Text files, or 'fortunes' / 'bible'")->capture_default_str();
  sp->add_option("--split", p->split, "validation, train or all (files given as --data: use all)")->capture_default_str();
  sp->add_option("--query-pos", p->opts.query_pos, "Query position N in each window (< the model's context)")
      ->required()->check(integer_in(0));
  sp->add_option("--windows", p->opts.windows, "Windows of N + 1 tokens to average over")
      ->capture_default_str()->check(integer_in(1, int64_t(1) << 20));
  sp->add_option("--recent", p->opts.recent, "Keys counted as the most recent")->capture_default_str()->check(integer_in(1));
  sp->add_option("--gate-bins", p->opts.gate_bins, "Histogram bins of gate values on [0, 1]")
      ->capture_default_str()->check(integer_in(1, 1000));
  sp->add_flag("--gates", p->gates, "Also print the gate histograms per layer and head");
  add_json_flag(*sp, p->json, "One JSON object (per-head masses by key position, buckets, gates)");
  sp->add_option("--plot", p->plot,
                 "PNG: log-scale bars of the mean mass by key position per layer (matplotlib; an existing file "
                 "is replaced)");
  add_threads_flag(*sp, p->threads);
  sp->callback([p] { run_profile(*p); });

  auto s = std::make_shared<StreamCli>();
  auto* es = app.add_subcommand("eval-stream", "Perplexity over a long text streamed through a KV-cache policy (StreamingLLM)");
  es->add_option("--model", s->model, "Model directory (config.json + model.safetensors)")->required();
  es->add_option("--data", s->data, "Text files, or 'fortunes' / 'bible' (one continuous token stream)")->capture_default_str();
  es->add_option("--split", s->split, "validation, train or all (files given as --data: use all)")->capture_default_str();
  es->add_option("--policy", s->policy, "dense, window, sink or recompute (sliding window re-computed per token)")
      ->capture_default_str()
      ->check(CLI::IsMember({"dense", "window", "sink", "recompute"}));
  es->add_option("--window", s->opts.window, "Recent tokens kept (window, sink, recompute); 0 = the model's context")
      ->capture_default_str()->check(integer_in(0));
  add_sink_tokens_flag(*es, s->opts.sink_tokens, "StreamingLLM sink tokens: first tokens kept by the sink policy")
      ->capture_default_str();
  es->add_option("--tokens", s->opts.tokens, "Tokens to stream")->capture_default_str()->check(integer_in(2));
  es->add_option("--chunk", s->chunk, "Predictions per point of the perplexity curve")->capture_default_str()->check(integer_in(1));
  es->add_option("--csv", s->csv,
                 "Write position, nll, chunk and cumulative perplexity per prediction (an existing file is replaced)");
  es->add_option("--plot", s->plot,
                 "PNG: perplexity against tokens streamed (matplotlib; an existing file is replaced)");
  add_json_flag(*es, s->json, "One JSON object");
  add_threads_flag(*es, s->threads);
  es->callback([s] { run_stream(*s); });
}

}  // namespace attnkit::cli
