// The "TorchX app" view: the entry point Airflow's UI loads (a React app of the plugin
// torchx_app_view, on the task instance page). The UI renders the default export with the
// task instance's key.
import { ChakraProvider, createSystem, defaultConfig } from "@chakra-ui/react";

import { AppView } from "./AppView";

export interface PluginProps {
  dagId?: string;
  runId?: string;
  taskId?: string;
  mapIndex?: string | number;
}

declare global {
  // the Airflow UI's own Chakra system (its theme, light and dark), where it shares it
  var ChakraUISystem: ReturnType<typeof createSystem> | undefined;
}

type System = ReturnType<typeof createSystem>;
let own: System | undefined;

/** The UI's own Chakra system where it shares one this bundle's Chakra can use (it has
 * every function this version's system has: Airflow 3.2's lacks some, and rendering with it
 * fails), else one of this bundle's with Chakra's default theme (light and dark too). */
const system = (): System => {
  own ??= createSystem(defaultConfig);
  const host = globalThis.ChakraUISystem as Record<string, unknown> | undefined;
  const usable =
    host !== undefined &&
    Object.entries(own).every(([key, value]) => typeof value !== "function" || typeof host[key] === "function");
  return usable ? (host as unknown as System) : own;
};

const PluginComponent = ({ dagId, mapIndex, runId, taskId }: PluginProps) => (
  <ChakraProvider value={system()}>
    {dagId && runId && taskId ? (
      <AppView dagId={dagId} mapIndex={Number(mapIndex ?? -1)} runId={runId} taskId={taskId} />
    ) : null}
  </ChakraProvider>
);

export default PluginComponent;
