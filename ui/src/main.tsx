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

let fallback: ReturnType<typeof createSystem> | undefined;

const system = () => globalThis.ChakraUISystem ?? (fallback ??= createSystem(defaultConfig));

const PluginComponent = ({ dagId, mapIndex, runId, taskId }: PluginProps) => (
  <ChakraProvider value={system()}>
    {dagId && runId && taskId ? (
      <AppView dagId={dagId} mapIndex={Number(mapIndex ?? -1)} runId={runId} taskId={taskId} />
    ) : null}
  </ChakraProvider>
);

export default PluginComponent;
